from django.apps import AppConfig


class RetriesConfig(AppConfig):
    name = "controlplane.retries"
    label = "retries"
