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
    # The worker identity of a mirror link: made and deleted with the link
    # (``mirrors.identity``), never by the tenant. PROTECT: the link's deletion deletes
    # the account (and its IdP client) first.
    managed_by_link = models.ForeignKey(
        "mirrors.MirrorLink",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="service_accounts",
    )

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


class LocalUser(TimestampedModel):
    """A person who signs in at the local issuer's login form (the embedded demo, where no
    Keycloak runs). ``subject`` is ``local.member_subject(username)``, the ``sub`` of their
    tokens and the ``Membership.subject`` of their tenant roles; ``password`` is a Django
    password hash (``django.contrib.auth.hashers``), never the password."""

    username = models.CharField(max_length=150, unique=True)
    subject = models.CharField(max_length=255, unique=True)
    password = models.CharField(max_length=255)
    platform_admin = models.BooleanField(default=False)

    class Meta:
        ordering = ["username"]

    def __str__(self) -> str:
        return str(self.username)


def new_family() -> str:
    return uuid.uuid4().hex


class AuthorizationCode(models.Model):
    """A code the local issuer's authorization endpoint handed out: single use, valid for
    ``local_oidc.CODE_TTL_S``, bound to the client, the redirect URI and (PKCE) the code
    challenge it was asked with. A redeemed code is kept (``redeemed_at``) until the
    sign-in it started would have ended, so a second redemption is recognised and
    revokes what the first bought: the refresh tokens of its ``family``."""

    code = models.CharField(max_length=120, unique=True)
    client_id = models.CharField(max_length=80)
    user = models.ForeignKey(LocalUser, on_delete=models.CASCADE, related_name="+")
    redirect_uri = models.TextField()
    scope = models.TextField(blank=True, default="")
    nonce = models.CharField(max_length=255, blank=True, default="")
    code_challenge = models.CharField(max_length=128, blank=True, default="")
    code_challenge_method = models.CharField(max_length=10, blank=True, default="")
    auth_time = models.IntegerField()
    expires_at = models.DateTimeField()
    family = models.CharField(max_length=32, default=new_family)
    redeemed_at = models.DateTimeField(null=True, blank=True)


class RefreshToken(models.Model):
    """A refresh token of the local issuer, stored as its SHA-256 digest (the token is 48
    random characters, so one hash stores it safely). Each use replaces it (rotation):
    the used one is kept (``used_at``) until the sign-in ends, so presenting it again is
    recognised as a replay and revokes its whole ``family`` — every token descended from
    the same sign-in (its authorization code's family)."""

    digest = models.CharField(max_length=80, unique=True)
    client_id = models.CharField(max_length=80)
    user = models.ForeignKey(LocalUser, on_delete=models.CASCADE, related_name="+")
    scope = models.TextField(blank=True, default="")
    expires_at = models.DateTimeField()
    family = models.CharField(max_length=32, default=new_family, db_index=True)
    used_at = models.DateTimeField(null=True, blank=True)


class SignInThrottle(models.Model):
    """Failed sign-ins at the local issuer's form under one ``key`` (a username, or a
    client address) since ``window_start``; the form refuses a key whose failures
    reached its limit until the window ends (``local_oidc.sign_in_refusal``)."""

    key = models.CharField(max_length=200, unique=True)
    window_start = models.DateTimeField()
    failures = models.PositiveIntegerField(default=0)
