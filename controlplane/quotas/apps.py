from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "controlplane.quotas"
    label = "quotas"

    def ready(self) -> None:
        # The quotas app gives every new tenant its quota; the tenants app, below it,
        # does not know quotas exist.
        from django.db.models.signals import post_save

        from controlplane.quotas.services import give_default_quota
        from controlplane.tenants.models import Tenant

        post_save.connect(give_default_quota, sender=Tenant, dispatch_uid="quotas.default")
