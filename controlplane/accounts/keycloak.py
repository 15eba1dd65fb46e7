"""Keycloak as the identity provider (DESIGN decision 7), through python-keycloak.

Layout in the realm ``settings.KEYCLOAK_REALM``: a group ``/tenants/<slug>@<tenant uid>``
per tenant (the tenant's immutable id in the name, so the ``groups`` claim names the
tenant for ever, not just its slug) with subgroups ``tenant-admin``, ``developer`` and
``viewer``; a member is a user in one of them; a service account is a confidential
client ``<slug>--<name>`` (client credentials only, tagged with the attributes
``meridian.tenant`` and ``meridian.tenant_id``, and a hard-coded ``account_id`` claim:
the account's immutable id) whose service-account user sits in the role's group.
Deprovisioning a tenant deletes its clients (with their service-account users) and its
group (every member loses the roles). The realm itself is set up by
``bootstrap_identity`` (``controlplane.accounts.keycloak_setup``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests
from django.conf import settings
from keycloak import KeycloakAdmin
from keycloak.exceptions import KeycloakConnectionError, KeycloakError

from controlplane.accounts.clients import BROKER_CLIENT_ID, CONTROLLER_CLIENT_ID, OidcEndpoints
from controlplane.accounts.local import group_path, tenant_group_path
from controlplane.accounts.models import ServiceAccount
from controlplane.accounts.tokens import JwksKeys, verify_token
from controlplane.core.choices import Role
from controlplane.core.errors import Conflict, InvalidRequest, NotFound, Unavailable
from controlplane.tenants.models import Tenant
from dataplane.client.auth import ClientCredentials, TokenSource

TENANT_ATTRIBUTE = "meridian.tenant"
TENANT_ID_ATTRIBUTE = "meridian.tenant_id"
ACCOUNT_CLAIM = "account_id"
ACCOUNT_MAPPER_NAME = "meridian-account-id"
NEW_USER_ACTIONS = ["VERIFY_EMAIL", "UPDATE_PASSWORD"]
HTTP_TIMEOUT_S = 10


def realm_url(realm: str | None = None) -> str:
    return f"{settings.KEYCLOAK_URL.rstrip('/')}/realms/{realm or settings.KEYCLOAK_REALM}"


def admin_for(realm: str) -> KeycloakAdmin:
    """An admin client logged in to the master realm as ``KEYCLOAK_ADMIN_USER``,
    managing ``realm``."""
    return KeycloakAdmin(
        server_url=settings.KEYCLOAK_URL.rstrip("/") + "/",
        username=settings.KEYCLOAK_ADMIN_USER,
        password=settings.KEYCLOAK_ADMIN_PASSWORD,
        realm_name=realm,
        user_realm_name="master",
        client_id="admin-cli",
        timeout=HTTP_TIMEOUT_S,
    )


@contextmanager
def idp_errors(action: str) -> Iterator[None]:
    """Keycloak failures as domain errors: unreachable or failing → ``Unavailable``
    (503), an existing object → ``Conflict``, a refused payload → ``InvalidRequest``."""
    try:
        yield
    except (KeycloakConnectionError, requests.RequestException) as exc:
        raise Unavailable(f"Keycloak is unreachable ({action}): {exc}", action=action) from exc
    except KeycloakError as exc:
        message = f"Keycloak refused to {action}: {exc.error_message!r}"
        if exc.response_code == 409:
            raise Conflict(message, action=action) from exc
        if exc.response_code == 400:
            raise InvalidRequest(message, action=action) from exc
        raise Unavailable(message, action=action, status=exc.response_code) from exc


def is_not_found(exc: KeycloakError) -> bool:
    return exc.response_code == 404


def internal_client_secret(client_id: str, realm: str | None = None) -> str:
    """The secret of internal client ``client_id`` (``bootstrap_realm`` made it)."""
    admin = admin_for(realm or settings.KEYCLOAK_REALM)
    with idp_errors(f"read the secret of {client_id}"):
        client = admin.get_client_id(client_id)
        if client is None:
            raise KeycloakError(f"client {client_id} is missing: run bootstrap_identity")
        return str(admin.get_client_secrets(client)["value"])


class KeycloakIdentity:
    """Verifies Keycloak's tokens offline (JWKS from the realm's certs endpoint, cached
    ``settings.JWKS_CACHE_S``) and provisions tenants, members and service accounts in
    the realm. Admin calls are serialised: they are rare and share one admin session."""

    @staticmethod
    def settings_key() -> tuple[Any, ...]:
        """The settings the provider is built from: when they change, a new one is."""
        return (settings.KEYCLOAK_URL, settings.KEYCLOAK_REALM, settings.TOKEN_AUDIENCE)

    def __init__(self, realm: str | None = None) -> None:
        self.realm: str = realm or settings.KEYCLOAK_REALM
        self.issuer: str = realm_url(self.realm)
        self._keys = JwksKeys.from_url(
            f"{self.issuer}/protocol/openid-connect/certs",
            ttl_s=settings.JWKS_CACHE_S,
            timeout_s=HTTP_TIMEOUT_S,
        )
        self._admin: KeycloakAdmin | None = None
        self._admin_lock = threading.RLock()

    # -- tokens -------------------------------------------------------------------------
    def verify(self, token: str) -> dict[str, Any]:
        return verify_token(token, self._keys, issuer=self.issuer)

    # -- the issuer's endpoints and the cluster's own clients ----------------------------
    def token_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    def jwks_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    def oidc_endpoints(self) -> OidcEndpoints:
        base = f"{self.issuer}/protocol/openid-connect"
        return OidcEndpoints(
            authorization=f"{base}/auth",
            token=f"{base}/token",
            userinfo=f"{base}/userinfo",
            jwks=f"{base}/certs",
            end_session=f"{base}/logout",
        )

    def internal_client_secret(self, client_id: str) -> str:
        """From the settings when given there, else read from the realm."""
        configured = {
            CONTROLLER_CLIENT_ID: settings.CONTROLLER_CLIENT_SECRET,
            BROKER_CLIENT_ID: settings.BROKER_CLIENT_SECRET,
        }[client_id]
        return str(configured) if configured else internal_client_secret(client_id, self.realm)

    def internal_tokens(self) -> TokenSource:
        """The controller client's tokens, from the realm's token endpoint."""
        secret = self.internal_client_secret(CONTROLLER_CLIENT_ID)
        return ClientCredentials(self.token_url(), CONTROLLER_CLIENT_ID, secret)

    # -- admin plumbing -----------------------------------------------------------------
    @contextmanager
    def admin(self, action: str) -> Iterator[KeycloakAdmin]:
        with self._admin_lock, idp_errors(action):
            if self._admin is None:
                self._admin = admin_for(self.realm)
            yield self._admin

    def _group_id(self, admin: KeycloakAdmin, path: str) -> str | None:
        try:
            return str(admin.get_group_by_path(path)["id"])
        except KeycloakError as exc:
            if is_not_found(exc):
                return None
            raise

    def _ensure_group(self, admin: KeycloakAdmin, path: str, parent: str | None) -> str:
        existing = self._group_id(admin, path)
        if existing is not None:
            return existing
        admin.create_group({"name": path.rsplit("/", 1)[1]}, parent=parent, skip_exists=True)
        created = self._group_id(admin, path)
        assert created is not None, path
        return created

    def _role_group(self, admin: KeycloakAdmin, tenant: Tenant, role: str) -> str:
        group = self._group_id(admin, group_path(tenant, role))
        if group is None:
            raise NotFound(
                f"tenant {tenant.slug!r} is not provisioned in Keycloak (no group "
                f"{group_path(tenant, role)!r})",
                tenant=tenant.slug,
            )
        return group

    def _move_to_role(self, admin: KeycloakAdmin, tenant: Tenant, user_id: str, role: str) -> None:
        """Leave every other role group of the tenant, join ``role``'s."""
        for other in Role.values:
            if other != role:
                self._leave(admin, tenant, user_id, other)
        admin.group_user_add(user_id, self._role_group(admin, tenant, role))

    def _leave(self, admin: KeycloakAdmin, tenant: Tenant, user_id: str, role: str) -> None:
        group = self._group_id(admin, group_path(tenant, role))
        if group is None:
            return
        try:
            admin.group_user_remove(user_id, group)
        except KeycloakError as exc:
            if not is_not_found(exc):
                raise

    # -- tenants ------------------------------------------------------------------------
    def provision_tenant(self, tenant: Tenant) -> str:
        """Creates ``/tenants/<slug>@<uid>`` and its role subgroups (reusing what exists);
        returns the tenant group's id."""
        with self.admin(f"provision tenant {tenant.slug}") as admin:
            root = self._ensure_group(admin, "/tenants", None)
            group = self._ensure_group(admin, tenant_group_path(tenant), root)
            for role in Role.values:
                self._ensure_group(admin, group_path(tenant, role), group)
            return group

    def deprovision_tenant(self, tenant: Tenant) -> None:
        """Deletes the tenant's service-account clients and its groups (members lose
        their role there; the users stay, they may belong to other tenants). A client
        tagged with the slug but another tenant's id is left alone; one tagged with the
        slug alone (made before ids) is the tenant's."""
        with self.admin(f"deprovision tenant {tenant.slug}") as admin:
            for client in admin.get_clients():
                if _client_of(client, tenant):
                    self._delete_client(admin, str(client["id"]))
            for path in (tenant_group_path(tenant), LEGACY_GROUP_PREFIX + tenant.slug):
                group = self._group_id(admin, path)
                if group is not None:
                    self._delete_group(admin, group)

    def adopt_legacy_layout(self, tenant: Tenant) -> list[str]:
        """Bring a tenant provisioned before tenant ids were in the layout into it: its
        group ``/tenants/<slug>`` is renamed ``<slug>@<uid>`` (members keep their
        roles, now in tokens the API and brokers accept) and each of its service
        accounts' clients gets the tenant id attribute and the ``account_id`` claim.
        Idempotent; returns what it changed."""
        changed: list[str] = []
        with self.admin(f"adopt the layout of tenant {tenant.slug}") as admin:
            legacy = self._group_id(admin, LEGACY_GROUP_PREFIX + tenant.slug)
            if legacy is not None and self._group_id(admin, tenant_group_path(tenant)) is None:
                admin.update_group(legacy, {"name": tenant_group_path(tenant).rsplit("/", 1)[1]})
                changed.append(f"group {LEGACY_GROUP_PREFIX + tenant.slug} renamed")
            for account in ServiceAccount.objects.filter(tenant=tenant).select_related("tenant"):
                if self._adopt_client(admin, account):
                    changed.append(f"client {account.client_id} names its ids")
        return changed

    @staticmethod
    def _adopt_client(admin: KeycloakAdmin, account: ServiceAccount) -> bool:
        names = {m.get("name") for m in admin.get_mappers_from_client(account.identity_ref)}
        if ACCOUNT_MAPPER_NAME in names:
            return False
        client = admin.get_client(account.identity_ref)
        attributes = {**(client.get("attributes") or {})}
        attributes[TENANT_ID_ATTRIBUTE] = str(account.tenant.uid)
        admin.update_client(account.identity_ref, {**client, "attributes": attributes})
        admin.add_mapper_to_client(account.identity_ref, _account_claim_mapper(account))
        return True

    @staticmethod
    def _delete_group(admin: KeycloakAdmin, group_id: str) -> None:
        try:
            admin.delete_group(group_id)
        except KeycloakError as exc:
            if not is_not_found(exc):
                raise

    # -- members ------------------------------------------------------------------------
    def invite_member(self, tenant: Tenant, *, username: str, email: str, role: str) -> str:
        """Creates the user if missing (to verify their email and choose a password on
        first login) and puts them in the role's group; returns the user id."""
        with self.admin(f"invite {username} to {tenant.slug}") as admin:
            self._role_group(admin, tenant, role)  # the tenant must be provisioned
            user_id = admin.get_user_id(username)
            if user_id is None:
                payload = {
                    "username": username,
                    "email": email or None,
                    "enabled": True,
                    "emailVerified": False,
                    "requiredActions": NEW_USER_ACTIONS,
                }
                user_id = admin.create_user(
                    {k: v for k, v in payload.items() if v is not None}, exist_ok=True
                )
            self._move_to_role(admin, tenant, user_id, role)
            return str(user_id)

    def change_member_role(self, tenant: Tenant, *, subject: str, role: str) -> None:
        with self.admin(f"change role of {subject} in {tenant.slug}") as admin:
            self._move_to_role(admin, tenant, subject, role)

    def remove_member(self, tenant: Tenant, *, subject: str) -> None:
        with self.admin(f"remove {subject} from {tenant.slug}") as admin:
            for role in Role.values:
                self._leave(admin, tenant, subject, role)

    # -- service accounts ---------------------------------------------------------------
    def create_service_account(self, account: ServiceAccount) -> tuple[str, str]:
        """Creates the confidential client and puts its service-account user in the
        role's group; returns ``(client uuid, secret)``. Nothing is left behind if a
        step fails."""
        with self.admin(f"create client {account.client_id}") as admin:
            group = self._role_group(admin, account.tenant, account.role)
            client = admin.create_client(self._client_payload(account))
            try:
                user = admin.get_client_service_account_user(client)
                admin.group_user_add(str(user["id"]), group)
                secret = str(admin.get_client_secrets(client)["value"])
            except BaseException:
                self._delete_client(admin, client)
                raise
            return client, secret

    @staticmethod
    def _client_payload(account: ServiceAccount) -> dict[str, Any]:
        return {
            "clientId": account.client_id,
            "name": f"{account.tenant.slug} / {account.name}",
            "description": account.description,
            "enabled": True,
            "protocol": "openid-connect",
            "publicClient": False,
            "clientAuthenticatorType": "client-secret",
            "serviceAccountsEnabled": True,
            "standardFlowEnabled": False,
            "implicitFlowEnabled": False,
            "directAccessGrantsEnabled": False,
            "attributes": {
                TENANT_ATTRIBUTE: account.tenant.slug,
                TENANT_ID_ATTRIBUTE: str(account.tenant.uid),
            },
            "protocolMappers": [_account_claim_mapper(account)],
        }

    def rotate_service_account_secret(self, account: ServiceAccount) -> str:
        """A new secret; the old one stops working at once."""
        with self.admin(f"rotate the secret of {account.client_id}") as admin:
            return str(admin.generate_client_secrets(account.identity_ref)["value"])

    def change_service_account_role(self, account: ServiceAccount, role: str) -> None:
        with self.admin(f"change role of {account.client_id}") as admin:
            user = admin.get_client_service_account_user(account.identity_ref)
            self._move_to_role(admin, account.tenant, str(user["id"]), role)

    def delete_service_account(self, account: ServiceAccount) -> None:
        """Deletes the client (and with it its service-account user); a client already
        gone is fine."""
        with self.admin(f"delete client {account.client_id}") as admin:
            self._delete_client(admin, account.identity_ref)

    @staticmethod
    def _delete_client(admin: KeycloakAdmin, client: str) -> None:
        try:
            admin.delete_client(client)
        except KeycloakError as exc:
            if not is_not_found(exc):
                raise


LEGACY_GROUP_PREFIX = "/tenants/"  # + slug: a tenant's group before ids were in its name


def _client_of(client: dict[str, Any], tenant: Tenant) -> bool:
    """Whether a Keycloak client is one of ``tenant``'s service accounts."""
    attributes = client.get("attributes") or {}
    if attributes.get(TENANT_ATTRIBUTE) != tenant.slug:
        return False
    tenant_id = attributes.get(TENANT_ID_ATTRIBUTE)
    return tenant_id is None or tenant_id == str(tenant.uid)


def _account_claim_mapper(account: ServiceAccount) -> dict[str, Any]:
    """Puts the account's immutable id in its access tokens (``account_id``): the API
    and the brokers refuse the token once the account is gone."""
    return {
        "name": ACCOUNT_MAPPER_NAME,
        "protocol": "openid-connect",
        "protocolMapper": "oidc-hardcoded-claim-mapper",
        "config": {
            "claim.name": ACCOUNT_CLAIM,
            "claim.value": str(account.uid),
            "jsonType.label": "String",
            "access.token.claim": "true",
            "id.token.claim": "false",
            "userinfo.token.claim": "false",
        },
    }
