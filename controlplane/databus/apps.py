from django.apps import AppConfig


class DatabusConfig(AppConfig):
    name = "controlplane.databus"
    label = "databus"
