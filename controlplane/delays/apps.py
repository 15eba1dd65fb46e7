from django.apps import AppConfig


class DelaysConfig(AppConfig):
    name = "controlplane.delays"
    label = "delays"
