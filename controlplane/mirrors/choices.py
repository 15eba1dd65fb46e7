from django.db import models


class Direction(models.TextChoices):
    """One leg (source -> target) or two (and target -> source)."""

    ONE_WAY = "one-way"
    TWO_WAY = "two-way"


class StartPosition(models.TextChoices):
    """Where a partition's copy starts when its target holds nothing copied yet."""

    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"


class MirrorHealth(models.TextChoices):
    """starting (no worker status yet) -> ok <-> degraded (with a reason); paused while
    the link is paused."""

    STARTING = "starting"
    OK = "ok"
    DEGRADED = "degraded"
    PAUSED = "paused"


class PartitionState(models.TextChoices):
    """What a worker reports of one partition it copies."""

    RESUMING = "resuming"
    COPYING = "copying"
    ERROR = "error"


class WorkerPhase(models.TextChoices):
    """pending (desired, not started) -> starting -> running <-> unreachable (status
    unreadable); stopping -> stopped; failed (with a reason)."""

    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    UNREACHABLE = "unreachable"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
