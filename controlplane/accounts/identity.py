"""Identity providers. ``get_identity()`` returns the configured one
(``settings.IDENTITY_PROVIDER``):

- ``KeycloakIdentity`` (``keycloak``): tenants, members and service accounts are
  provisioned in Keycloak through python-keycloak; tokens are Keycloak's.
- ``LocalIdentity`` (``local``, the embedded demo): the control plane is its own issuer,
  with RSA keys in the database and a JWKS at ``/api/v1/auth/jwks.json``.

Both issue RS256 JWTs with the same claims: ``sub``, ``preferred_username``, ``aud``
(``TOKEN_AUDIENCE``), ``groups`` (``/tenants/<slug>@<tenant uid>/<role>``),
``realm_access.roles`` (``platform-admin`` for operators) and, for a service account,
``account_id`` (``dataplane.client.claims``), so the API and the brokers verify either
offline, the same way (``controlplane.accounts.tokens``).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from controlplane.accounts.clients import OidcEndpoints
from controlplane.accounts.keycloak import KeycloakIdentity
from controlplane.accounts.local import LocalIdentity
from controlplane.accounts.models import ServiceAccount
from controlplane.accounts.tokens import InvalidToken
from controlplane.tenants.identity import TenantIdentity
from controlplane.tenants.models import Tenant
from dataplane.client.auth import TokenSource


class IdentityProvider(TenantIdentity, Protocol):
    """What the control plane needs of an IdP: what tenants need (``TenantIdentity``:
    ``provision_tenant``, ``deprovision_tenant``) and the rest below. Provisioning
    methods are idempotent where stated and raise ``Unavailable``/``Conflict``/
    ``NotFound`` (domain errors) when the IdP fails or refuses."""

    issuer: str

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, once its signature (RS256), expiry, issuer and audience
        check out; else ``InvalidToken``."""
        ...

    def token_url(self) -> str:
        """Where clients get tokens with the client-credentials grant."""
        ...

    def jwks_url(self) -> str:
        """Where verifiers (the brokers) fetch the issuer's public keys."""
        ...

    def oidc_endpoints(self) -> OidcEndpoints:
        """The OpenID Connect endpoints people sign in through (the console)."""
        ...

    def internal_client_secret(self, client_id: str) -> str:
        """The secret of internal client ``client_id`` (``accounts.clients``)."""
        ...

    def internal_tokens(self) -> TokenSource:
        """A token source for the control plane's own client (``meridian-controller``),
        whose tokens carry the internal role."""
        ...

    def invite_member(self, tenant: Tenant, *, username: str, email: str, role: str) -> str:
        """Creates the user if missing and gives them ``role`` in the tenant (and no
        other role there); returns the user's subject."""
        ...

    def change_member_role(self, tenant: Tenant, *, subject: str, role: str) -> None: ...

    def remove_member(self, tenant: Tenant, *, subject: str) -> None:
        """Takes every role in the tenant from the user; idempotent."""
        ...

    def create_service_account(self, account: ServiceAccount) -> tuple[str, str]:
        """Creates the client for an unsaved ``account`` (``client_id``, ``tenant`` and
        ``role`` set) and returns ``(identity_ref, secret)``. May set fields of
        ``account`` that the caller then saves."""
        ...

    def rotate_service_account_secret(self, account: ServiceAccount) -> str:
        """A new secret (the old one stops working); may set fields of ``account``."""
        ...

    def change_service_account_role(self, account: ServiceAccount, role: str) -> None: ...

    def delete_service_account(self, account: ServiceAccount) -> None:
        """Removes the client; a client already gone is fine."""
        ...


_identity: IdentityProvider | None = None
_identity_config: tuple[Any, ...] = ()
_identity_lock = threading.Lock()


# The providers by ``settings.IDENTITY_PROVIDER``, each with the settings it is built from.
PROVIDERS: dict[str, type[LocalIdentity] | type[KeycloakIdentity]] = {
    "local": LocalIdentity,
    "keycloak": KeycloakIdentity,
}


def _config() -> tuple[Any, ...]:
    provider = settings.IDENTITY_PROVIDER
    if provider not in PROVIDERS:
        raise ImproperlyConfigured(
            f"IDENTITY_PROVIDER must be one of {sorted(PROVIDERS)}, not {provider!r}"
        )
    return (provider, *PROVIDERS[provider].settings_key())


def get_identity() -> IdentityProvider:
    """The configured provider, built once per configuration (its JWKS cache lives as
    long as it does)."""
    global _identity, _identity_config
    with _identity_lock:
        config = _config()
        if _identity is None or config != _identity_config:
            _identity = PROVIDERS[config[0]]()
            _identity_config = config
        return _identity


def reset_identity() -> None:
    """Forget the provider (tests that switch settings)."""
    global _identity
    with _identity_lock:
        _identity = None


__all__ = [
    "PROVIDERS",
    "IdentityProvider",
    "InvalidToken",
    "KeycloakIdentity",
    "LocalIdentity",
    "OidcEndpoints",
    "get_identity",
    "reset_identity",
]
