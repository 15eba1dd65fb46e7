from django.db import models


class RunState(models.TextChoices):
    """A Spark job run (an export's run, an index's build): queued -> running ->
    succeeded | failed (with ``error``)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class RunTrigger(models.TextChoices):
    """Who asked for a run: a caller of the API or console, or the schedule."""

    MANUAL = "manual"
    SCHEDULE = "schedule"


class ValueFormat(models.TextChoices):
    """How record values are read (``spark.jobs.spec.VALUE_FORMATS``)."""

    JSON = "json"
    RAW = "raw"


class ScheduleKind(models.TextChoices):
    """When an export runs: on request only, every ``interval_minutes``, at the minutes
    a ``cron`` expression names, or ``continuous`` (a new run as soon as the last ends)."""

    MANUAL = "manual"
    INTERVAL = "interval"
    CRON = "cron"
    CONTINUOUS = "continuous"
