"""Control-plane fixtures. The database is the Postgres that ``./dev test`` starts
(``controlplane.settings.testing``); tokens come from the local issuer unless a test
talks to Keycloak itself.

``client_for(roles={"acme": "developer"}, platform_admin=False)`` returns a DRF
``APIClient`` that sends a bearer token carrying exactly those claims.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from controlplane.accounts.identity import LocalIdentity, get_identity, reset_identity
from controlplane.core.choices import PLATFORM_ADMIN_ROLE
from dataplane.client.claims import tenant_group

ClientFactory = Callable[..., APIClient]


@pytest.fixture
def local_identity(settings) -> LocalIdentity:  # type: ignore[no-untyped-def]
    settings.IDENTITY_PROVIDER = "local"
    reset_identity()
    identity = get_identity()
    assert isinstance(identity, LocalIdentity)
    yield identity
    reset_identity()


def tenant_uid(slug: str) -> str:
    """The id of the live tenant ``slug``; a made-up one when there is none."""
    from controlplane.tenants.models import Tenant

    uid = Tenant.objects.filter(slug=slug).values_list("uid", flat=True).first()
    return str(uid or uuid.uuid4())


def token_for(
    identity: LocalIdentity,
    *,
    roles: dict[str, str] | None = None,
    platform_admin: bool = False,
    username: str | None = None,
    **kwargs: object,
) -> str:
    username = username or f"user-{uuid.uuid4().hex[:8]}"
    groups = [
        f"{tenant_group(slug, tenant_uid(slug))}/{role}" for slug, role in (roles or {}).items()
    ]
    return identity.issue_token(
        subject=str(uuid.uuid5(uuid.NAMESPACE_URL, username)),
        username=username,
        groups=groups,
        realm_roles=[PLATFORM_ADMIN_ROLE] if platform_admin else [],
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
def client_for(db: None, local_identity: LocalIdentity) -> ClientFactory:
    def make(**kwargs: object) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for(local_identity, **kwargs)}")
        return client

    return make


@pytest.fixture
def admin_client(client_for: ClientFactory) -> APIClient:
    """A platform administrator."""
    return client_for(platform_admin=True, username="operator")


@pytest.fixture
def anonymous_client(db: None) -> APIClient:
    return APIClient()
