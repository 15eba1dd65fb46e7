"""Setting up the Keycloak realm the control plane uses (``bootstrap_identity``) and its
operators (``create_platform_admin``). Every step is idempotent: running it again
leaves an up-to-date realm as it is and completes a partial one."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from keycloak import KeycloakAdmin
from keycloak.exceptions import KeycloakError

from controlplane.accounts.clients import (
    BROKER_CLIENT_ID,
    CONTROLLER_CLIENT_ID,
    INTERNAL_CLIENT_IDS,
    console_client_id,
    console_redirect_uri,
    console_signed_out_uri,
)
from controlplane.accounts.keycloak import admin_for, idp_errors
from controlplane.core.choices import PLATFORM_ADMIN_ROLE

CLI_CLIENT_ID = "meridian-cli"
SCOPE_NAME = "meridian"


def bootstrap_realm(realm: str | None = None) -> list[str]:
    """Creates (or completes) the realm: the realm role ``platform-admin``; a default
        client scope putting ``settings.TOKEN_AUDIENCE`` in ``aud`` and the full group paths
        in ``groups`` of every client's tokens; the ``/tenants`` group; the public client
        ``meridian-cli`` with direct access grants; the console's public client
    ``meridian-console`` (authorization code with PKCE S256 required, the console's
    redirect URIs); the realm role ``settings.INTERNAL_ROLE``
        and the confidential clients ``meridian-controller`` and ``meridian-broker`` whose
        service accounts hold it (the cluster's own callers, see ``accounts/clients.py``),
        their secrets those the settings give (``CONTROLLER_CLIENT_SECRET``,
        ``BROKER_CLIENT_SECRET``; Keycloak's own when unset), so processes given them
        need no admin access to read them. Returns what it did, step by step."""
    realm = realm or settings.KEYCLOAK_REALM
    done: list[str] = []
    with idp_errors(f"bootstrap realm {realm}"):
        _ensure_realm(admin_for("master"), realm, done)
        admin = admin_for(realm)
        admin.create_realm_role(
            {"name": PLATFORM_ADMIN_ROLE, "description": "Meridian platform operator"},
            skip_exists=True,
        )
        done.append(f"realm role {PLATFORM_ADMIN_ROLE}")
        scope = _ensure_scope(admin, done)
        admin.create_group({"name": "tenants"}, skip_exists=True)
        done.append("group /tenants")
        _ensure_cli_client(admin, scope, done)
        _ensure_console_client(admin, scope, done)
        _ensure_internal_clients(admin, scope, done)
    return done


def delete_realm(realm: str) -> None:
    with idp_errors(f"delete realm {realm}"):
        try:
            admin_for("master").delete_realm(realm)
        except KeycloakError as exc:
            if exc.response_code != 404:
                raise


def _ensure_realm(master: KeycloakAdmin, realm: str, done: list[str]) -> None:
    if any(r["realm"] == realm for r in master.get_realms()):
        done.append(f"realm {realm} (exists)")
        return
    master.create_realm(
        {"realm": realm, "enabled": True, "displayName": "Meridian"}, skip_exists=True
    )
    done.append(f"realm {realm} (created)")


def _scope_mappers() -> list[dict[str, Any]]:
    return [
        {
            "name": "meridian-audience",
            "protocol": "openid-connect",
            "protocolMapper": "oidc-audience-mapper",
            "config": {
                "included.custom.audience": settings.TOKEN_AUDIENCE,
                "access.token.claim": "true",
                "id.token.claim": "false",
                "introspection.token.claim": "true",
            },
        },
        {
            "name": "groups",
            "protocol": "openid-connect",
            "protocolMapper": "oidc-group-membership-mapper",
            "config": {
                "claim.name": "groups",
                "full.path": "true",
                "access.token.claim": "true",
                "id.token.claim": "true",
                "userinfo.token.claim": "true",
                "introspection.token.claim": "true",
            },
        },
    ]


def _ensure_scope(admin: KeycloakAdmin, done: list[str]) -> str:
    """The ``meridian`` client scope with both mappers, a realm default scope (so every
    client created afterwards gets it). Returns its id."""
    scope_id = admin.create_client_scope(
        {
            "name": SCOPE_NAME,
            "protocol": "openid-connect",
            "description": "Meridian API audience and tenant groups",
            "attributes": {"include.in.token.scope": "false"},
        },
        skip_exists=True,
    )
    present = {m["name"] for m in admin.get_mappers_from_client_scope(scope_id)}
    for mapper in _scope_mappers():
        if mapper["name"] not in present:
            admin.add_mapper_to_client_scope(scope_id, mapper)
    if not any(s["id"] == scope_id for s in admin.get_default_default_client_scopes()):
        admin.add_default_default_client_scope(scope_id)
    done.append(f"client scope {SCOPE_NAME} (realm default)")
    return str(scope_id)


def _ensure_cli_client(admin: KeycloakAdmin, scope_id: str, done: list[str]) -> None:
    client = admin.create_client(
        {
            "clientId": CLI_CLIENT_ID,
            "name": "Meridian CLI",
            "enabled": True,
            "protocol": "openid-connect",
            "publicClient": True,
            "directAccessGrantsEnabled": True,
            "standardFlowEnabled": False,
            "attributes": {"oauth2.device.authorization.grant.enabled": "true"},
        },
        skip_exists=True,
    )
    # A client that existed before the scope was a realm default lacks it.
    if not any(s["id"] == scope_id for s in admin.get_client_default_client_scopes(client)):
        admin.add_client_default_client_scope(client, scope_id, {})
    done.append(f"client {CLI_CLIENT_ID}")


def _console_client_payload() -> dict[str, Any]:
    return {
        "clientId": console_client_id(),
        "name": "Meridian console",
        "enabled": True,
        "protocol": "openid-connect",
        "publicClient": True,
        "standardFlowEnabled": True,
        "implicitFlowEnabled": False,
        "directAccessGrantsEnabled": False,
        "redirectUris": [console_redirect_uri()],
        "webOrigins": ["+"],
        "attributes": {
            "pkce.code.challenge.method": "S256",
            "post.logout.redirect.uris": console_signed_out_uri(),
        },
    }


def _ensure_console_client(admin: KeycloakAdmin, scope_id: str, done: list[str]) -> None:
    """Created, or brought up to date (the console's URL may have changed)."""
    payload = _console_client_payload()
    client = admin.get_client_id(payload["clientId"])
    if client is None:
        client = admin.create_client(payload)
    else:
        admin.update_client(client, payload)
    if not any(s["id"] == scope_id for s in admin.get_client_default_client_scopes(client)):
        admin.add_client_default_client_scope(client, scope_id, {})
    done.append(f"client {payload['clientId']} (redirect {console_redirect_uri()})")


def _ensure_internal_clients(admin: KeycloakAdmin, scope_id: str, done: list[str]) -> None:
    admin.create_realm_role(
        {"name": settings.INTERNAL_ROLE, "description": "Meridian's own services"},
        skip_exists=True,
    )
    role = admin.get_realm_role(settings.INTERNAL_ROLE)
    for client_id in INTERNAL_CLIENT_IDS:
        admin.create_client(_internal_client_payload(client_id), skip_exists=True)
        client = admin.get_client_id(client_id)  # create returns the id only when it creates
        if client is None:
            raise KeycloakError(f"client {client_id} vanished while being set up")
        if not any(s["id"] == scope_id for s in admin.get_client_default_client_scopes(client)):
            admin.add_client_default_client_scope(client, scope_id, {})
        user = admin.get_client_service_account_user(client)
        admin.assign_realm_roles(str(user["id"]), [role])
        done.append(f"client {client_id} (service account with {settings.INTERNAL_ROLE})")
        if _set_configured_secret(admin, client, client_id):
            done.append(f"client {client_id} (its secret set from the settings)")


def _set_configured_secret(admin: KeycloakAdmin, client: str, client_id: str) -> bool:
    """Give the internal client the secret the settings name, when they name one and
    it has another; returns whether it changed."""
    configured = {
        CONTROLLER_CLIENT_ID: settings.CONTROLLER_CLIENT_SECRET,
        BROKER_CLIENT_ID: settings.BROKER_CLIENT_SECRET,
    }[client_id]
    if not configured or admin.get_client_secrets(client).get("value") == configured:
        return False
    representation = admin.get_client(client)
    representation["secret"] = configured
    admin.update_client(client, representation)
    return True


def _internal_client_payload(client_id: str) -> dict[str, Any]:
    return {
        "clientId": client_id,
        "name": f"Meridian {client_id.removeprefix('meridian-')}",
        "enabled": True,
        "protocol": "openid-connect",
        "publicClient": False,
        "clientAuthenticatorType": "client-secret",
        "serviceAccountsEnabled": True,
        "standardFlowEnabled": False,
        "implicitFlowEnabled": False,
        "directAccessGrantsEnabled": False,
    }


def create_platform_admin(
    username: str, password: str, *, email: str, realm: str | None = None
) -> str:
    """A Keycloak user holding the realm role ``platform-admin`` with ``password`` (not
    temporary) and a verified ``email`` (Keycloak refuses logins to accounts without
    one); an existing user gets the role and the new password. Returns its id."""
    admin = admin_for(realm or settings.KEYCLOAK_REALM)
    with idp_errors(f"create platform admin {username}"):
        payload: dict[str, Any] = {
            "username": username,
            "enabled": True,
            "firstName": username,
            "lastName": "operator",
            "email": email,
            "emailVerified": True,
        }
        user_id = admin.create_user(payload, exist_ok=True)
        admin.set_user_password(user_id, password, temporary=False)
        admin.assign_realm_roles(user_id, [admin.get_realm_role(PLATFORM_ADMIN_ROLE)])
        return str(user_id)
