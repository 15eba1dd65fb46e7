from django.db import models


class RunState(models.TextChoices):
    """A Spark job run (an export's run, an index's build): queued -> running ->
    succeeded | failed (with ``error``)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class RunTrigger(models.TextChoices):
    """Who asked for a run: a caller of the API or console, the schedule, or a continuous
    export's job (one row per run that moved its coverage or failed)."""

    MANUAL = "manual"
    SCHEDULE = "schedule"
    CONTINUOUS = "continuous"


class ValueFormat(models.TextChoices):
    """How record values are read (``spark.jobs.spec.VALUE_FORMATS``)."""

    JSON = "json"
    RAW = "raw"


class ScheduleKind(models.TextChoices):
    """When an export runs: on request only, every ``interval_minutes``, at the minutes
    a ``cron`` expression names, or ``continuous`` (one long-lived job, kept running by
    the beat, runs every ``settings.EXPORT_CONTINUOUS_INTERVAL_S``)."""

    MANUAL = "manual"
    INTERVAL = "interval"
    CRON = "cron"
    CONTINUOUS = "continuous"
