from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from controlplane.core.choices import ProvisioningStatus
from controlplane.core.models import StatusModel, TimestampedModel
from controlplane.topics.choices import AclOperation, DriftKind, Durability
from dataplane.broker.topics import MAX_TOPIC_LENGTH

# The part after "<tenant>.": DESIGN decision 9 (no '~', which marks lane topics).
TOPIC_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
topic_name_validator = RegexValidator(
    TOPIC_NAME_RE,
    "1-200 characters: letters, digits, '.', '_' and '-', starting with a letter or digit",
)


def full_name_problem(tenant_slug: str, name: str) -> str | None:
    """Why ``<tenant_slug>.<name>`` cannot name a topic on the brokers, whose limit is on
    the full name (``MAX_TOPIC_LENGTH``), or None."""
    room = MAX_TOPIC_LENGTH - len(tenant_slug) - 1
    if len(name) > room:
        return (
            f"at most {room} characters in tenant {tenant_slug!r}: the full name "
            f"'<tenant>.<name>' has at most {MAX_TOPIC_LENGTH}"
        )
    return None


# A local retention of -2 means "as the total retention", -1 unlimited.
LOCAL_RETENTION_TOTAL = -2
LOCAL_RETENTION_FIELDS = {
    "local_retention_ms": "retention_ms",
    "local_retention_bytes": "retention_bytes",
}


def local_retention_problems(topic: Topic) -> dict[str, list[str]]:
    """Why the topic's local retentions cannot be: each is -2 (the total), -1
    (unlimited) or >= 0, and at most the total when both are bounded."""
    problems: dict[str, list[str]] = {}
    for field, total_field in LOCAL_RETENTION_FIELDS.items():
        local, total = getattr(topic, field), getattr(topic, total_field)
        if not isinstance(local, int) or local < LOCAL_RETENTION_TOTAL:
            problems[field] = ["-2 (the total retention), -1 (unlimited) or >= 0"]
        elif local >= 0 and total is not None and total >= 0 and local > total:
            problems[field] = [f"at most {total_field} ({total}): the local part of the total"]
    return problems


# When a partition's active segment is sealed (so, with remote_storage, uploaded): at
# this size or age. The defaults are the brokers' (1 GiB, 7 days); the bounds keep a
# tenant from segments so small that their files and uploads swamp a broker.
MIB = 2**20
DAY_MS = 24 * 3600 * 1000
DEFAULT_SEGMENT_BYTES = 1024 * MIB
DEFAULT_SEGMENT_MS = 7 * DAY_MS
MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES = MIB, 1024 * MIB
MIN_SEGMENT_MS, MAX_SEGMENT_MS = 60 * 1000, 30 * DAY_MS


# A token's ``azp`` or ``sub``: printable, no whitespace.
principal_validator = RegexValidator(
    r"\A[!-~]{1,255}\Z", "a client id or subject: printable ASCII, no spaces"
)


# Internal topics (DESIGN decision 9) a tenant owns without naming them: its timer logs
# ``__delay.<tenant>``, one per cluster where it delays records (``controlplane.delays``).
INTERNAL_PREFIX = "__"


class TopicQuerySet(models.QuerySet["Topic"]):
    def tenant_facing(self) -> TopicQuerySet:
        """Without internal topics: what a tenant names, lists and quotas count."""
        return self.exclude(name__startswith=INTERNAL_PREFIX)

    def origins(self) -> TopicQuerySet:
        """Origin topics only: what a name means unless a region is named."""
        return self.filter(mirror_of__isnull=True).tenant_facing()

    def named(self, full_name: str, region: str | None = None) -> TopicQuerySet:
        """The topic ``full_name``: the origin, or with ``region`` (a region's name) the
        topic of that name in that region (the origin or a mirror copy)."""
        found = self.filter(full_name=full_name).tenant_facing()
        if region:
            return found.filter(cluster__region__name=region)
        return found.filter(mirror_of__isnull=True)


class Topic(StatusModel):
    """A tenant's topic: desired partition count and configuration. ``generation``
    grows with every desired change; ``observed_generation`` is the last one the
    reconciler made true on every broker (ready when they are equal).

    A *lane topic* (``<tenant>.<topic>~<lane>``, ``lanes.names``) has ``trunk`` (its
    trunk topic, whose configuration it copies) and ``lane_name``; a trunk topic has
    neither. Lane topics are created on demand by the lanes app and never count against
    ``max_topics`` or ``max_partitions`` (``topics.usage``), only storage; a trunk with
    lane topics is deleted with them (``services.delete_topic``).

    An *internal topic* (a name starting with ``__``: a tenant's timer log, one per
    cluster, made by the delays app) is the tenant's, reconciled and placed as any, but
    hidden from its lists and lookups (``TopicQuerySet.tenant_facing``) and counted for
    storage only.

    A *mirror copy* has ``mirror_of`` (its origin, in another region) and, while the
    link that made it exists, ``mirror_link``: same full name, partitions and config as
    its origin, on a cluster of another region. A full name is unique among origins; a
    lookup by name means the origin unless a region is named (``lookup``)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="topics")
    cluster = models.ForeignKey("regions.Cluster", on_delete=models.PROTECT, related_name="topics")
    name = models.CharField(max_length=200, validators=[topic_name_validator])
    # Unique among origins; each mirror copy has its origin's (``mirror_of``).
    full_name = models.CharField(max_length=240, db_index=True, editable=False)
    partitions = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    retention_ms = models.BigIntegerField()
    retention_bytes = models.BigIntegerField(help_text="per partition")
    max_message_bytes = models.PositiveIntegerField(
        default=1_048_576, validators=[MinValueValidator(1024), MaxValueValidator(64 * 2**20)]
    )
    durability = models.CharField(
        max_length=16, choices=Durability.choices, default=Durability.INTERVAL
    )
    # How many brokers hold each partition (fixed at creation; the service picks the
    # default from the cluster), how many of them must be in sync for an acks=all write,
    # and whether a replica out of sync may be elected when no in-sync one is left.
    replication_factor = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1)]
    )
    min_insync_replicas = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1)]
    )
    unclean_leader_election = models.BooleanField(default=False)
    # Tiered storage (docs/tiered-storage.md): sealed segments go to the cluster's object
    # store; the local retentions bound what stays on the brokers' disks once uploaded
    # (LOCAL_RETENTION_TOTAL: the same as the total retention, -1: unlimited).
    remote_storage = models.BooleanField(default=False)
    local_retention_ms = models.BigIntegerField(default=-2)
    local_retention_bytes = models.BigIntegerField(default=-2, help_text="per partition")
    # When the active segment is sealed (hence, with remote_storage, uploaded).
    max_segment_bytes = models.BigIntegerField(
        default=DEFAULT_SEGMENT_BYTES,
        validators=[MinValueValidator(MIN_SEGMENT_BYTES), MaxValueValidator(MAX_SEGMENT_BYTES)],
    )
    segment_ms = models.BigIntegerField(
        default=DEFAULT_SEGMENT_MS,
        validators=[MinValueValidator(MIN_SEGMENT_MS), MaxValueValidator(MAX_SEGMENT_MS)],
    )
    generation = models.PositiveBigIntegerField(default=1)
    observed_generation = models.PositiveBigIntegerField(default=0)
    created_by = models.CharField(max_length=255, blank=True, default="")
    # PROTECT: the reconciler deletes a trunk's row only once its lane topics' rows (and
    # so their partitions on the brokers) are gone.
    trunk = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="lane_topics"
    )
    lane_name = models.CharField(max_length=32, blank=True, default="")
    # A mirror copy (``controlplane.mirrors``): the origin topic it copies, in another
    # region, and the link that made it (null once that link is deleted: the copy stays a
    # copy, so its name stays unique among origins). PROTECT: an origin with copies is
    # not deleted (``services.delete_topic`` answers 409).
    mirror_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="mirror_copies"
    )
    mirror_link = models.ForeignKey(
        "mirrors.MirrorLink",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="target_topics",
    )

    objects = TopicQuerySet.as_manager()

    class Meta:
        ordering = ["full_name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["full_name"],
                condition=models.Q(mirror_of__isnull=True) & ~models.Q(name__startswith="__"),
                name="topic_unique_origin_full_name",
            ),
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=models.Q(mirror_of__isnull=True) & ~models.Q(name__startswith="__"),
                name="topic_unique_name",
            ),
            # A tenant's internal topics have one name in every cluster (its timer log).
            models.UniqueConstraint(
                fields=["full_name", "cluster"],
                condition=models.Q(name__startswith="__"),
                name="topic_unique_internal_per_cluster",
            ),
            # One copy per region is the service's rule (a region's clusters are a join
            # away); one per cluster is what the database can hold.
            models.UniqueConstraint(
                fields=["mirror_of", "cluster"], name="topic_unique_copy_per_cluster"
            ),
            models.CheckConstraint(
                condition=models.Q(trunk__isnull=True, lane_name="")
                | models.Q(trunk__isnull=False) & ~models.Q(lane_name=""),
                name="topic_lane_has_trunk",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "status"])]

    def __str__(self) -> str:
        return self.full_name

    @property
    def is_lane_topic(self) -> bool:
        return self.trunk_id is not None

    @property
    def is_mirror_copy(self) -> bool:
        return self.mirror_of_id is not None

    @property
    def is_internal(self) -> bool:
        return self.name.startswith(INTERNAL_PREFIX)

    def clean(self) -> None:
        super().clean()
        name_problem = self.tenant_id and full_name_problem(self.tenant.slug, self.name)
        if name_problem:
            raise ValidationError({"name": [name_problem]})
        if self.min_insync_replicas > self.replication_factor:
            raise ValidationError(
                {
                    "min_insync_replicas": [
                        f"must be between 1 and the replication factor ({self.replication_factor})"
                    ]
                }
            )
        problems = local_retention_problems(self)
        if problems:
            raise ValidationError(problems)

    @property
    def storage_bytes(self) -> int:
        """What the topic may hold at most: what counts against the storage quota."""
        return self.partitions * self.retention_bytes


class PartitionAssignment(TimestampedModel):
    """Where one partition lives and what its leader last reported about it.

    ``replicas`` are the ``Broker.broker_id`` of every broker holding the partition, in
    order: ``replicas[0]`` is the preferred leader and ``broker`` is that broker's row
    (so code that wants "where the partition is" keeps one answer). ``isr`` is the
    committed in-sync replica set, ``isr_version`` grows at every committed change of
    it. ``leader`` (null: no leader yet, or offline) and ``leader_epoch`` (grows at every
    change of leader, the first election keeps 0) are the controller's.

    A reassignment in progress has ``target_replicas`` (the replicas asked for);
    ``replicas`` then holds the target ones first and the leaving ones after them until
    every target replica is in the ISR. ``removing_replicas`` are brokers the partition
    is still to be deleted from once it no longer lists them."""

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="assignments")
    partition = models.PositiveIntegerField()
    broker = models.ForeignKey("regions.Broker", on_delete=models.PROTECT, related_name="+")
    replicas = models.JSONField(default=list)
    isr = models.JSONField(default=list)
    isr_version = models.PositiveIntegerField(default=0)
    target_replicas = models.JSONField(null=True, blank=True, default=None)
    removing_replicas = models.JSONField(default=list, blank=True)
    leader = models.ForeignKey(
        "regions.Broker", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    leader_epoch = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=16, choices=ProvisioningStatus.choices, default=ProvisioningStatus.PENDING
    )
    size_bytes = models.BigIntegerField(default=0)  # on the leader's disk
    remote_bytes = models.BigIntegerField(default=0)  # in the object store (tiered storage)
    # Of those, the bytes no longer on the leader's disk: size_bytes + remote_only_bytes
    # is what the partition holds, each byte counted once (storage quotas).
    remote_only_bytes = models.BigIntegerField(default=0)
    log_end_offset = models.BigIntegerField(default=0)
    observed_at = models.DateTimeField(null=True, blank=True)

    def save(self, *args: Any, **kwargs: Any) -> None:
        # A row made without replicas (replication factor 1, older callers) is held by
        # its ``broker`` alone, which is then its whole ISR.
        if not self.replicas:
            self.replicas = [self.broker.broker_id]
        if not self.isr:
            self.isr = list(self.replicas)
        super().save(*args, **kwargs)

    class Meta:
        ordering = ["topic", "partition"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "partition"], name="assignment_unique")
        ]


class TopicAcl(TimestampedModel):
    """One principal's operations on one topic. Once a topic has entries, brokers let a
    caller that is not a tenant-admin do only the operations of the entries naming its
    token's client id (``azp``) or subject (``sub``), within what its role allows.

    ``principal`` is a service account's client id (``<tenant>--<name>``, of the
    topic's tenant) or a user's subject; ``operations`` is a non-empty subset of
    ``AclOperation``, kept in that order."""

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="acls")
    principal = models.CharField(max_length=255, validators=[principal_validator])
    operations = models.JSONField(default=list)
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["topic", "principal"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "principal"], name="topic_acl_unique")
        ]

    def __str__(self) -> str:
        return f"{self.topic.full_name} {self.principal}"

    def clean(self) -> None:
        super().clean()
        operations = self.operations
        if not isinstance(operations, list) or not operations:
            raise ValidationError({"operations": ["name at least one operation"]})
        unknown = sorted({str(op) for op in operations} - set(AclOperation.values))
        if unknown:
            choices = ", ".join(AclOperation.values)
            raise ValidationError(
                {"operations": [f"unknown: {', '.join(unknown)}; one of {choices}"]}
            )
        if len(set(operations)) != len(operations):
            raise ValidationError({"operations": ["an operation is named twice"]})


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
