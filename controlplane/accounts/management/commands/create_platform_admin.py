"""``create_platform_admin``: an operator account holding the realm role platform-admin."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.accounts.identity import LocalIdentity, get_identity
from controlplane.accounts.keycloak_setup import create_platform_admin
from controlplane.accounts.local import member_subject
from controlplane.accounts.services import set_local_password
from controlplane.core.actors import Actor
from controlplane.core.choices import PLATFORM_ADMIN_ROLE
from controlplane.core.errors import DomainError


class Command(BaseCommand):
    help = (
        "Keycloak: create (or update) a user with the realm role platform-admin and the "
        "given password. Local issuer: print a platform-admin access token for the "
        "username, valid --ttl seconds; with --password, also a local user who signs in "
        "to the console with it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", help="required with Keycloak")
        parser.add_argument("--email", help="required with Keycloak (a complete account)")
        parser.add_argument("--ttl", type=int, default=12 * 3600, help="local issuer only")

    def handle(self, *args: Any, **options: Any) -> None:
        identity = get_identity()
        username = options["username"]
        if isinstance(identity, LocalIdentity):
            if options.get("password"):
                set_local_password(
                    username,
                    options["password"],
                    platform_admin=True,
                    actor=Actor.system("create_platform_admin"),
                )
            token = identity.issue_token(
                subject=member_subject(username),
                username=username,
                realm_roles=[PLATFORM_ADMIN_ROLE],
                ttl_s=options["ttl"],
            )
            self.stdout.write(token)
            return
        if not options.get("password") or not options.get("email"):
            raise CommandError("--password and --email are required with Keycloak")
        try:
            user_id = create_platform_admin(username, options["password"], email=options["email"])
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"platform admin {username} ({user_id})")
