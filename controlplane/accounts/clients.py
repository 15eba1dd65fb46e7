"""The cluster's own clients: ``meridian-controller`` (the control plane) and
``meridian-broker`` (every broker), whatever the issuer, and the local issuer's one
secret for both, kept in a private file (``internal_secret_file()``)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from controlplane.core.private_files import read_or_create_private

CONTROLLER_CLIENT_ID = "meridian-controller"
BROKER_CLIENT_ID = "meridian-broker"
INTERNAL_CLIENT_IDS = (CONTROLLER_CLIENT_ID, BROKER_CLIENT_ID)


def internal_secret_file() -> Path:
    """The local issuer's file holding the internal clients' secret."""
    configured = settings.INTERNAL_CLIENT_SECRET_FILE
    return Path(configured or Path(settings.DATA_DIR) / "internal-client-secret")


def local_internal_secret() -> str:
    """The internal clients' secret of the local issuer, made (0600, in a private
    directory) on first use; the first process to make it wins."""
    made = read_or_create_private(internal_secret_file(), _new_internal_secret)
    return made.decode().strip()


def _new_internal_secret() -> bytes:
    return secrets.token_urlsafe(32).encode() + b"\n"


# The web console's sign-in client (authorization code + PKCE, a public client: the
# console's server holds no secret for it), registered in Keycloak's realm and known to
# the local issuer under the same id.
def console_client_id() -> str:
    return str(settings.CONSOLE_CLIENT_ID)


def console_redirect_uri() -> str:
    """Where the provider sends the browser back with a code."""
    return f"{settings.CONSOLE_URL.rstrip('/')}/auth/callback"


def console_signed_out_uri() -> str:
    """Where the provider sends the browser after ending its session."""
    return f"{settings.CONSOLE_URL.rstrip('/')}/auth/signed-out"


@dataclass(frozen=True)
class OidcEndpoints:
    """An issuer's OpenID Connect endpoints, as a relying party (the console) uses them:
    the browser is sent to ``authorization`` and ``end_session``; the console's server
    calls ``token``, ``userinfo`` and ``jwks``."""

    authorization: str
    token: str
    userinfo: str
    jwks: str
    end_session: str
