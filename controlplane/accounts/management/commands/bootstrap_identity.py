"""``bootstrap_identity``: set up the configured identity provider; safe to run again."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.accounts.identity import LocalIdentity, get_identity
from controlplane.accounts.keycloak_setup import bootstrap_realm
from controlplane.core.errors import DomainError


class Command(BaseCommand):
    help = (
        "Keycloak: create or complete the realm (platform-admin role, the meridian client "
        "scope with audience and groups, the /tenants group, the meridian-cli client). "
        "Local issuer: create its first signing key."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--realm", help="Keycloak realm (default: settings.KEYCLOAK_REALM)")

    def handle(self, *args: Any, **options: Any) -> None:
        identity = get_identity()
        if isinstance(identity, LocalIdentity):
            kid, _ = identity.signing_key()
            self.stdout.write(f"local issuer {identity.issuer!r}: signing key {kid}")
            return
        realm = options.get("realm") or settings.KEYCLOAK_REALM
        try:
            steps = bootstrap_realm(realm)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        for step in steps:
            self.stdout.write(f"ok: {step}")
