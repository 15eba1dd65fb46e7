from __future__ import annotations

import uuid

from django.db import models

from controlplane.core.choices import ProvisioningStatus, Role
from controlplane.core.models import StatusModel, TimestampedModel
from controlplane.core.validators import slug_validator


class Tenant(StatusModel):
    """A customer of the platform. Its slug prefixes every topic name (``<slug>.<topic>``);
    its ``uid`` is what identifies it for ever: every credential names it (the IdP group
    ``/tenants/<slug>@<uid>``), so a later tenant that takes the slug of a deleted one
    shares none of its credentials."""

    slug = models.CharField(max_length=32, unique=True, validators=[slug_validator])
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    name = models.CharField(max_length=200)
    home_region = models.ForeignKey(
        "regions.Region", null=True, blank=True, on_delete=models.PROTECT, related_name="tenants"
    )
    identity_ref = models.CharField(
        max_length=255, blank=True, default="", help_text="the tenant's group id in the IdP"
    )
    # The regions the tenant may use besides its home region (mirror links), set by a
    # platform administrator.
    regions = models.ManyToManyField("regions.Region", blank=True, related_name="+")

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(TimestampedModel):
    """A person's role in a tenant; the IdP group membership is the source of the
    token's claims, this row the control plane's record of it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    subject = models.CharField(max_length=255, help_text="the IdP user id")
    username = models.CharField(max_length=255)
    email = models.EmailField(blank=True, default="")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    status = models.CharField(
        max_length=16, choices=ProvisioningStatus.choices, default=ProvisioningStatus.READY
    )

    class Meta:
        ordering = ["tenant", "username"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "username"], name="membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.username}@{self.tenant.slug} ({self.role})"
