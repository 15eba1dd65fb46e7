"""Stored rate and lag history (see ``tiers`` for the block layout)."""

from __future__ import annotations

from django.db import models

from controlplane.metrics.choices import SeriesKind
from controlplane.metrics.fields import PointsField


def _points() -> PointsField:
    return PointsField()


class Series(models.Model):
    """One measured thing: a topic, or a consumer group's consumption of one topic, of
    ``tenant`` — the tenant whose slug prefixed the name when the series was made. Reads
    go through the tenant's id, never its slug: a later tenant taking the slug of a
    deleted one (whose topics may have had the same names) starts series of its own.

    The tenant's deletion deletes its series and their blocks (Django's cascade). No
    database constraint: a collection running while a tenant is deleted neither fails
    nor makes the deletion fail; a series it leaves naming the gone tenant is never read
    (tenant ids are never reused) and goes with its blocks' retention."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, db_constraint=False, related_name="+"
    )
    kind = models.CharField(max_length=8, choices=SeriesKind.choices)
    topic = models.CharField(max_length=255)
    group = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "kind", "topic", "group"], name="series_unique_in_tenant"
            )
        ]
        indexes = [models.Index(fields=["group", "kind"])]

    def __str__(self) -> str:
        return f"{self.kind}:{self.group}:{self.topic}" if self.group else self.topic


class Block(models.Model):
    """A tier's block of consecutive points of a series (``tiers``: the tier is
    ``resolution_s``). A topic series fills ``records_per_s`` and ``bytes_per_s``; a group
    series fills ``records_per_s``, ``lag_records`` and, when brokers report it,
    ``lag_s``. Every array has the tier's ``slots`` elements (NULL: no point there)."""

    series = models.ForeignKey(Series, on_delete=models.CASCADE, related_name="blocks")
    resolution_s = models.PositiveSmallIntegerField()
    start = models.DateTimeField()
    records_per_s = _points()
    bytes_per_s = _points()
    lag_records = _points()
    lag_s = _points()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["series", "resolution_s", "start"], name="block_unique_start"
            )
        ]
        indexes = [models.Index(fields=["resolution_s", "start"])]


class Collection(models.Model):
    """One collection run: which instants have been measured (a series with no point at
    a measured instant was idle there: its rates and lag were 0)."""

    at = models.DateTimeField(unique=True)
    brokers_asked = models.PositiveIntegerField(default=0)
    brokers_answered = models.PositiveIntegerField(default=0)
    points_written = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at"]


class CollectorState(models.Model):
    """The one row (pk 1) carrying state between runs: the counters read last (rates
    are their deltas) and how far the fine tier has been rolled into the coarse one.
    Runs lock it, so two collections never interleave."""

    counters = models.JSONField(default=dict)
    generation = models.PositiveBigIntegerField(default=0)  # grows at every collection
    rolled_until = models.DateTimeField(null=True)
    updated_at = models.DateTimeField(auto_now=True)
