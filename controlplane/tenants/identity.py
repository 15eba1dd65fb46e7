"""What the tenants app needs of the identity provider: a tenant's IdP objects made and
removed. The provider itself (Keycloak, or the control plane's own issuer) is the
accounts app's, above this one: its ``IdentityProvider`` protocol extends
``TenantIdentity``, and ``AccountsConfig.ready`` installs the configured provider here
(``use_identity``). So tenant code never branches on which provider runs, and never
imports the code that talks to it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from controlplane.tenants.models import Tenant


class TenantIdentity(Protocol):
    def provision_tenant(self, tenant: Tenant) -> str:
        """Creates the tenant's group ``/tenants/<slug>@<uid>`` and role subgroups, reusing
        what exists; returns the IdP's reference of the tenant group."""
        ...

    def deprovision_tenant(self, tenant: Tenant) -> None:
        """Removes the tenant's groups and service-account clients (every credential of
        the tenant at the IdP); idempotent."""
        ...


class IdentityNotInstalledError(RuntimeError):
    """No identity provider was installed (the accounts app is not among the installed
    apps)."""


_provider: Callable[[], TenantIdentity] | None = None
_lock = threading.Lock()


def use_identity(provider: Callable[[], TenantIdentity]) -> None:
    """Make ``provider()`` (called at each use: the configured provider may change with
    settings) the identity provider of tenants."""
    global _provider
    with _lock:
        _provider = provider


def tenant_identity() -> TenantIdentity:
    """The installed identity provider; ``IdentityNotInstalledError`` when there is none."""
    with _lock:
        provider = _provider
    if provider is None:
        raise IdentityNotInstalledError("no identity provider is installed for tenants")
    return provider()
