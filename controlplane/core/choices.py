from django.db import models


class ProvisioningStatus(models.TextChoices):
    """pending -> provisioning -> ready | failed (with a reason); deleting -> gone."""

    PENDING = "pending"
    PROVISIONING = "provisioning"
    READY = "ready"
    FAILED = "failed"
    DELETING = "deleting"


class Role(models.TextChoices):
    """A member's role in one tenant (Keycloak group ``/tenants/<slug>@<uid>/<role>``)."""

    TENANT_ADMIN = "tenant-admin"
    DEVELOPER = "developer"
    VIEWER = "viewer"


PLATFORM_ADMIN_ROLE = "platform-admin"  # a realm role, not a tenant role
