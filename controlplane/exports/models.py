"""Parquet exports: what a tenant declares (``Export``) and each Spark run of it
(``ExportRun``). The run's shape (``JobRun``) is shared with index builds."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from controlplane.core.models import TimestampedModel
from controlplane.core.validators import slug_validator
from controlplane.exports import fields as field_rules
from controlplane.exports import schedule
from controlplane.exports.choices import RunState, RunTrigger, ScheduleKind, ValueFormat
from spark.jobs.spec import PARTITION_COLUMNS

MAX_EXPORT_FIELDS = 64


class Export(TimestampedModel):
    """A tenant's Parquet export of one topic (``spark.jobs.spec.ExportSpec``): how values
    are read (``value_format``), the declared columns (``fields``; none with ``json``:
    inferred), the directory columns (``partition_by``, of ``date``/``hour`` in that
    order), where files go (``target_uri``, normalized; ``targets``), whether lane topics
    are included, and when it runs (``schedule_kind`` with ``interval_minutes`` or
    ``cron``). ``enabled`` false stops scheduled runs (a manual run still goes)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="exports")
    name = models.CharField(max_length=32, validators=[slug_validator])
    topic = models.ForeignKey("topics.Topic", on_delete=models.CASCADE, related_name="exports")
    value_format = models.CharField(
        max_length=8, choices=ValueFormat.choices, default=ValueFormat.JSON
    )
    fields = models.JSONField(default=list, blank=True)
    partition_by = models.JSONField(default=list, blank=True)
    target_uri = models.CharField(max_length=1024)
    include_lanes = models.BooleanField(default=False)
    schedule_kind = models.CharField(
        max_length=16, choices=ScheduleKind.choices, default=ScheduleKind.MANUAL
    )
    interval_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(schedule.MAX_INTERVAL_MINUTES)],
    )
    cron = models.CharField(max_length=128, blank=True, default="")
    enabled = models.BooleanField(default=True)
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="export_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    def clean(self) -> None:
        super().clean()
        problems: dict[str, list[str]] = {}
        found = field_rules.field_problems(self.fields, min_fields=0, max_fields=MAX_EXPORT_FIELDS)
        if found:
            problems["fields"] = found
        if self.value_format == ValueFormat.RAW and self.fields:
            problems["fields"] = ["raw values have no fields: declare none, or use json"]
        if not _partition_by_ok(self.partition_by):
            problems["partition_by"] = [
                f"a list of {', '.join(PARTITION_COLUMNS)} in that order, each at most once"
            ]
        problems.update(_schedule_problems(self))
        if problems:
            raise ValidationError(problems)


def _partition_by_ok(value: Any) -> bool:
    if not isinstance(value, list) or any(v not in PARTITION_COLUMNS for v in value):
        return False
    return value == [c for c in PARTITION_COLUMNS if c in value]


def _schedule_problems(export: Export) -> dict[str, list[str]]:
    kind = export.schedule_kind
    if kind == ScheduleKind.INTERVAL and export.interval_minutes is None:
        return {"interval_minutes": ["required with an interval schedule"]}
    if kind != ScheduleKind.INTERVAL and export.interval_minutes is not None:
        return {"interval_minutes": ["only with an interval schedule"]}
    if kind == ScheduleKind.CRON:
        try:
            schedule.cron_sets(export.cron)
        except ValueError as exc:
            return {"cron": [str(exc)]}
    elif export.cron:
        return {"cron": ["only with a cron schedule"]}
    return {}


class JobRun(models.Model):
    """One run of a Spark job. ``covered``: per ``"<topic>/<partition>"`` the end offset
    (exclusive) the job's committed manifest covers after the run; ``lag``: per partition,
    the records its end offset (as last reported) was past ``covered`` when the run
    ended; ``rows``, ``bytes``,
    ``files`` and ``dead_letter_rows``: what the run added (``spark.jobs.spec.JobResult``);
    ``error``: why it failed (the job's own words, or the launcher's)."""

    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.QUEUED)
    trigger = models.CharField(max_length=16, choices=RunTrigger.choices, default=RunTrigger.MANUAL)
    queued_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    manifest_version = models.PositiveBigIntegerField(default=0)
    covered = models.JSONField(default=dict, blank=True)
    lag = models.JSONField(default=dict, blank=True)
    rows = models.PositiveBigIntegerField(default=0)
    bytes = models.PositiveBigIntegerField(default=0)
    files = models.PositiveBigIntegerField(default=0)
    dead_letter_rows = models.PositiveBigIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    requested_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        abstract = True

    @property
    def is_active(self) -> bool:
        return self.state in (RunState.QUEUED, RunState.RUNNING)


class ExportRun(JobRun):
    export = models.ForeignKey(Export, on_delete=models.CASCADE, related_name="runs")

    class Meta:
        ordering = ["export", "-queued_at", "-id"]

    def __str__(self) -> str:
        return f"{self.export} run {self.pk}"
