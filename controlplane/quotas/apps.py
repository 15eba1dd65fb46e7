from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "controlplane.quotas"
    label = "quotas"
