from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from controlplane.core.choices import ProvisioningStatus
from controlplane.core.models import StatusModel, TimestampedModel
from controlplane.topics.choices import DriftKind, Durability

# The part after "<tenant>.": DESIGN decision 9 (no '~', which marks lane topics).
TOPIC_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
topic_name_validator = RegexValidator(
    TOPIC_NAME_RE,
    "1-200 characters: letters, digits, '.', '_' and '-', starting with a letter or digit",
)


class Topic(StatusModel):
    """A tenant's topic: desired partition count and configuration. ``generation``
    grows with every desired change; ``observed_generation`` is the last one the
    reconciler made true on every broker (ready when they are equal)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="topics")
    cluster = models.ForeignKey("regions.Cluster", on_delete=models.PROTECT, related_name="topics")
    name = models.CharField(max_length=200, validators=[topic_name_validator])
    full_name = models.CharField(max_length=240, unique=True, editable=False)
    partitions = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    retention_ms = models.BigIntegerField()
    retention_bytes = models.BigIntegerField(help_text="per partition")
    max_message_bytes = models.PositiveIntegerField(
        default=1_048_576, validators=[MinValueValidator(1024), MaxValueValidator(64 * 2**20)]
    )
    durability = models.CharField(
        max_length=16, choices=Durability.choices, default=Durability.INTERVAL
    )
    generation = models.PositiveBigIntegerField(default=1)
    observed_generation = models.PositiveBigIntegerField(default=0)
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["full_name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="topic_unique_name")]
        indexes = [models.Index(fields=["tenant", "status"])]

    def __str__(self) -> str:
        return self.full_name

    @property
    def storage_bytes(self) -> int:
        """What the topic may hold at most: what counts against the storage quota."""
        return self.partitions * self.retention_bytes


class PartitionAssignment(TimestampedModel):
    """Where one partition lives (its leader, while replication factor is 1) and what
    the broker last reported about it."""

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="assignments")
    partition = models.PositiveIntegerField()
    broker = models.ForeignKey("regions.Broker", on_delete=models.PROTECT, related_name="+")
    # Elected by the region's controller (with replication factor 1: ``broker``); null
    # until then. ``leader_epoch`` grows at every change of leader.
    leader = models.ForeignKey(
        "regions.Broker", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    leader_epoch = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=16, choices=ProvisioningStatus.choices, default=ProvisioningStatus.PENDING
    )
    size_bytes = models.BigIntegerField(default=0)
    log_end_offset = models.BigIntegerField(default=0)
    observed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["topic", "partition"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "partition"], name="assignment_unique")
        ]


class DriftFinding(TimestampedModel):
    """A difference between desired and actual state found by the reconciler."""

    broker = models.ForeignKey("regions.Broker", on_delete=models.CASCADE, related_name="drift")
    topic_name = models.CharField(max_length=240)
    partition = models.IntegerField()
    kind = models.CharField(max_length=16, choices=DriftKind.choices)
    detail = models.TextField(blank=True, default="")
    healed = models.BooleanField(default=False)
    last_seen_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["broker", "topic_name", "partition", "kind"],
                condition=models.Q(resolved_at__isnull=True),
                name="drift_open_unique",
            )
        ]
