from django.apps import AppConfig


class RegionsConfig(AppConfig):
    name = "controlplane.regions"
    label = "regions"
