"""``adopt_tenant_ids``: bring Keycloak tenants provisioned before tenant ids were in the
identity layout into it; safe to run again."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from controlplane.accounts.identity import KeycloakIdentity, get_identity
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import DomainError
from controlplane.tenants.models import Tenant


class Command(BaseCommand):
    help = (
        "Keycloak: rename each ready tenant's group /tenants/<slug> to /tenants/<slug>@<id> "
        "(members keep their roles) and give its service accounts' clients the account_id "
        "claim. Nothing to do with the local issuer."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        identity = get_identity()
        if not isinstance(identity, KeycloakIdentity):
            self.stdout.write(
                "the local issuer builds every token from the database: nothing to do"
            )
            return
        try:
            for tenant in Tenant.objects.filter(status=ProvisioningStatus.READY):
                for step in identity.adopt_legacy_layout(tenant):
                    self.stdout.write(f"ok: {tenant.slug}: {step}")
        except DomainError as exc:
            raise CommandError(exc.message) from exc
