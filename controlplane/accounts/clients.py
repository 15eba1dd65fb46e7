"""The cluster's own clients: ``meridian-controller`` (the control plane) and
``meridian-broker`` (every broker), whatever the issuer, and the local issuer's one
secret for both, kept in a private file (``internal_secret_file()``)."""

from __future__ import annotations

import secrets
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
