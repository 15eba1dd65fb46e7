from django.db import models


class ProvisioningStatus(models.TextChoices):
    """pending -> provisioning -> ready | failed (with a reason); deleting -> gone."""

    PENDING = "pending"
    PROVISIONING = "provisioning"
    READY = "ready"
    FAILED = "failed"
    DELETING = "deleting"
