"""Mirror links (``MirrorLink``): a tenant's topics copied between two regions, one way
or both; the progress workers report per leg and partition (``MirrorPartition``); the
sparse source -> target offset map of acknowledged copies (``MirrorOffsetPoint``); and
the worker processes the controllers run (``MirrorWorker``).

A *leg* is one direction of a link: ``(from_region, to_region)``. A one-way link has
the leg source -> target; a two-way link also target -> source. A leg's worker runs in
its *to* region (it pulls from the *from* region and writes locally), started by that
region's controller; its rows here are keyed by the leg's ``from_region``."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from controlplane.core.models import StatusModel, TimestampedModel
from controlplane.core.validators import slug_validator
from controlplane.mirrors.choices import (
    Direction,
    MirrorHealth,
    PartitionState,
    StartPosition,
    WorkerPhase,
)

MAX_PATTERN_LENGTH = 200


def pattern_problem(pattern: str) -> str:
    """Why ``pattern`` is not a topic pattern (empty when it is one): a glob matched
    against short topic names (``fnmatch.fnmatchcase``: ``*``, ``?``, ``[...]``), of at
    most ``MAX_PATTERN_LENGTH`` printable characters. Globs, not regular expressions: a
    pattern is matched at every supervision round, and a glob's match time is bounded
    by its length and the name's (no catastrophic backtracking)."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"at most {MAX_PATTERN_LENGTH} characters"
    if not pattern.isprintable() or any(c.isspace() for c in pattern):
        return "printable characters without spaces"
    return ""


class MirrorLink(StatusModel):
    """A tenant's mirror link: which topics (``topics``, short names without the
    tenant prefix, or ``topic_pattern``, a glob matched against short names,
    ``pattern_problem``; exactly one; origin topics of the source region only), between
    which regions, one way or both, from where a partition's copy starts when its target
    holds nothing copied yet, and whether it is ``paused``.

    ``status`` is the provisioning state (``ProvisioningStatus``: ``deleting`` until the
    controllers stopped its workers); ``health`` what the workers' progress says
    (``services.evaluate_health``)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="mirrors")
    name = models.CharField(max_length=32, validators=[slug_validator])
    source_region = models.ForeignKey("regions.Region", on_delete=models.PROTECT, related_name="+")
    target_region = models.ForeignKey("regions.Region", on_delete=models.PROTECT, related_name="+")
    direction = models.CharField(max_length=8, choices=Direction.choices, default=Direction.ONE_WAY)
    topics = models.JSONField(default=list, blank=True)
    # max_length is the column's (255); the rule is pattern_problem's.
    topic_pattern = models.CharField(max_length=255, blank=True, default="")
    include_lanes = models.BooleanField(default=False)
    start_position = models.CharField(
        max_length=16, choices=StartPosition.choices, default=StartPosition.EARLIEST
    )
    # With ``latest``: the time the link was made (or set to latest), resolved once.
    start_timestamp_ms = models.BigIntegerField(null=True, blank=True)
    paused = models.BooleanField(default=False)
    health = models.CharField(
        max_length=16, choices=MirrorHealth.choices, default=MirrorHealth.STARTING
    )
    health_reason = models.TextField(blank=True, default="")
    health_changed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="mirror_link_unique_name"),
            models.CheckConstraint(
                condition=~models.Q(source_region=models.F("target_region")),
                name="mirror_link_two_regions",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    @property
    def legs(self) -> list[tuple[int, int]]:
        """``(from_region_id, to_region_id)`` of each leg."""
        forward = (self.source_region_id, self.target_region_id)
        if self.direction == Direction.TWO_WAY:
            return [forward, (self.target_region_id, self.source_region_id)]
        return [forward]

    def clean(self) -> None:
        super().clean()
        problems: dict[str, list[str]] = {}
        problems.update(_selection_problems(self.topics, self.topic_pattern))
        if self.start_position == StartPosition.TIMESTAMP and self.start_timestamp_ms is None:
            problems["start_timestamp_ms"] = ["required with start_position timestamp"]
        elif self.start_position == StartPosition.EARLIEST and self.start_timestamp_ms is not None:
            problems["start_timestamp_ms"] = ["only with start_position timestamp"]
        elif self.start_timestamp_ms is not None and self.start_timestamp_ms < 0:
            problems["start_timestamp_ms"] = ["milliseconds since the epoch, >= 0"]
        if problems:
            raise ValidationError(problems)


def _selection_problems(topics: object, pattern: str) -> dict[str, list[str]]:
    if not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
        return {"topics": ["a list of topic names (without the tenant prefix)"]}
    if bool(topics) == bool(pattern):
        message = "name the topics or give a topic_pattern: exactly one of the two"
        return {"topics": [message], "topic_pattern": [message]}
    if len(set(topics)) != len(topics):
        return {"topics": ["a topic is named twice"]}
    problem = pattern_problem(pattern) if pattern else ""
    return {"topic_pattern": [f"not a topic pattern: {problem}"]} if problem else {}


class MirrorPartition(models.Model):
    """What the worker of a leg last reported of one source partition (its status
    document, ``mirror/``): where the copy is (``next_source_offset``: the next source
    offset to copy), what is left (``lag_records``, ``lag_seconds``), what it copied and
    skipped, and its error if any. ``progress_at`` is the last time
    ``next_source_offset`` moved (or the row appeared); ``error_since`` when the current
    error was first reported."""

    link = models.ForeignKey(MirrorLink, on_delete=models.CASCADE, related_name="partitions")
    from_region = models.ForeignKey("regions.Region", on_delete=models.PROTECT, related_name="+")
    to_region = models.ForeignKey("regions.Region", on_delete=models.PROTECT, related_name="+")
    source_topic = models.CharField(max_length=240)
    target_topic = models.CharField(max_length=240)
    partition = models.PositiveIntegerField()
    state = models.CharField(
        max_length=16, choices=PartitionState.choices, default=PartitionState.RESUMING
    )
    next_source_offset = models.BigIntegerField(default=0)
    source_end_offset = models.BigIntegerField(default=0)
    source_log_start_offset = models.BigIntegerField(default=0)
    target_end_offset = models.BigIntegerField(default=0)
    lag_records = models.BigIntegerField(default=0)
    lag_seconds = models.FloatField(default=0.0)
    copied_records = models.BigIntegerField(default=0)
    copied_bytes = models.BigIntegerField(default=0)
    skipped_records = models.BigIntegerField(default=0)
    records_lost_to_retention = models.BigIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    error_since = models.DateTimeField(null=True, blank=True)
    progress_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["link", "from_region", "source_topic", "partition"]
        constraints = [
            models.UniqueConstraint(
                fields=["link", "from_region", "source_topic", "partition"],
                name="mirror_partition_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.link} {self.source_topic}/{self.partition} from {self.from_region_id}"


class MirrorOffsetPoint(models.Model):
    """One point of a leg's offset map: the record at ``source_offset`` of the source
    partition was copied, and acknowledged, at ``target_offset`` of the target partition
    of the same number (the topic's name is the same on both sides). Exact at its points;
    sparse (at most one per partition per checkpoint interval). Kept in the target
    region's rows (the leg's ``to`` region)."""

    link = models.ForeignKey(MirrorLink, on_delete=models.CASCADE, related_name="offset_points")
    from_region = models.ForeignKey("regions.Region", on_delete=models.PROTECT, related_name="+")
    topic = models.CharField(max_length=240)
    partition = models.PositiveIntegerField()
    source_offset = models.BigIntegerField()
    target_offset = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["link", "from_region", "topic", "partition", "source_offset"]
        constraints = [
            models.UniqueConstraint(
                fields=["link", "from_region", "topic", "partition", "source_offset"],
                name="mirror_offset_point_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition} {self.source_offset}->{self.target_offset}"


class MirrorWorker(TimestampedModel):
    """The worker process of one leg (``link``, ``from_region`` -> ``to_region``), run by
    the ``to_region`` controller through its provisioner. ``generation`` grows at every
    start (it is in the worker's config and status: a status of another generation is
    not this process's); ``config_hash`` is the digest of the config it was started
    with (a different desired config restarts it)."""

    link = models.ForeignKey(MirrorLink, on_delete=models.CASCADE, related_name="workers")
    from_region = models.ForeignKey("regions.Region", on_delete=models.PROTECT, related_name="+")
    to_region = models.ForeignKey("regions.Region", on_delete=models.PROTECT, related_name="+")
    generation = models.PositiveBigIntegerField(default=0)
    pid = models.IntegerField(null=True, blank=True)
    host = models.CharField(max_length=255, blank=True, default="127.0.0.1")
    status_port = models.PositiveIntegerField(null=True, blank=True)
    data_dir = models.CharField(max_length=1024, blank=True, default="")
    config_hash = models.CharField(max_length=64, blank=True, default="")
    phase = models.CharField(
        max_length=16, choices=WorkerPhase.choices, default=WorkerPhase.PENDING
    )
    phase_reason = models.TextField(blank=True, default="")
    last_status_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["link", "from_region"]
        constraints = [
            models.UniqueConstraint(fields=["link", "from_region"], name="mirror_worker_unique_leg")
        ]

    def __str__(self) -> str:
        return f"{self.link} worker from {self.from_region_id} (gen {self.generation})"
