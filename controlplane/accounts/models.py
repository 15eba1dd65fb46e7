from __future__ import annotations

import uuid

from django.db import models

from controlplane.core.choices import Role
from controlplane.core.models import StatusModel, TimestampedModel
from controlplane.core.validators import slug_validator


class ServiceAccount(StatusModel):
    """A tenant's machine identity: an OAuth client-credentials client in the IdP
    (``client_id`` ``<tenant>--<name>``). The secret is shown once, at creation and at
    rotation; the control plane keeps only its SHA-256 digest (local issuer) or nothing
    (Keycloak). ``uid`` is the account's immutable id, the ``account_id`` claim of its
    tokens: a later account of the same name has another, so a deleted account's tokens
    never pass for it."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="service_accounts"
    )
    name = models.CharField(max_length=32, validators=[slug_validator])
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    description = models.CharField(max_length=500, blank=True, default="")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.DEVELOPER)
    client_id = models.CharField(max_length=80, unique=True, editable=False)
    identity_ref = models.CharField(max_length=255, blank=True, default="")
    secret_hash = models.CharField(max_length=255, blank=True, default="")
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="service_account_unique")
        ]

    def __str__(self) -> str:
        return str(self.client_id)


class SigningKey(TimestampedModel):
    """An RSA key of the local issuer (the embedded demo's stand-in for Keycloak). The
    newest active key signs; every active key is in the JWKS. The private half is stored
    only sealed under a key-encryption key kept outside the database
    (``accounts.signing_keys``)."""

    kid = models.CharField(max_length=64, unique=True)
    sealed_private_key = models.TextField()
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["-created_at"]
