from django.db import models

from controlplane.core.choices import ProvisioningStatus

TopicStatus = ProvisioningStatus


class Durability(models.TextChoices):
    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


class DriftKind(models.TextChoices):
    """What the reconciler found: a desired partition missing on its broker (healed),
    a partition whose config differs (healed), or one no topic wants (reported only)."""

    MISSING = "missing"
    CONFIG = "config"
    UNKNOWN = "unknown"
