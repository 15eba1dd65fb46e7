"""Writing, rolling up and pruning blocks of points (layout in ``tiers``), in bulk SQL:
each is one statement for every series at once, whatever the number of series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from controlplane.metrics.models import Block, Collection, Series
from controlplane.metrics.tiers import COARSE, FINE, SLOTS, Tier

MEASURES = ("records_per_s", "bytes_per_s", "lag_records", "lag_s")


@dataclass(frozen=True)
class Point:
    """One series' values at one instant (None: not measured)."""

    series_id: int
    records_per_s: float | None = None
    bytes_per_s: float | None = None
    lag_records: float | None = None
    lag_s: float | None = None


def _upsert_sql(source: str) -> str:
    """An upsert of one slot (``%(slot)s``) of blocks ``(series_id, %(resolution)s,
    %(start)s)`` from ``source`` (rows ``series_id`` and the measures): a new block gets
    arrays of SLOTS NULLs but the slot; an existing one has only that slot set."""
    pad = "array_fill(NULL::float8, ARRAY[{n}])"
    before, after = pad.format(n="%(slot)s - 1"), pad.format(n=f"{SLOTS} - %(slot)s")
    values = ", ".join(f"{before} || v.{m}::float8 || {after}" for m in MEASURES)
    updates = ", ".join(f"{m}[%(slot)s] = EXCLUDED.{m}[%(slot)s]" for m in MEASURES)
    table = Block._meta.db_table
    return (
        f"INSERT INTO {table} AS b (series_id, resolution_s, start, {', '.join(MEASURES)}) "
        f"SELECT v.series_id, %(resolution)s, %(start)s, {values} FROM ({source}) AS v "
        f"ON CONFLICT (series_id, resolution_s, start) DO UPDATE SET {updates}"
    )


def write_points(at: datetime, points: Sequence[Point]) -> None:
    """Set the fine-tier slot of instant ``at`` of every series of ``points``."""
    if not points:
        return
    source = (
        "SELECT * FROM unnest(%(ids)s::int[], "
        + ", ".join(f"%({m})s::float8[]" for m in MEASURES)
        + f") AS u(series_id, {', '.join(MEASURES)})"
    )
    params: dict[str, Any] = {
        "ids": [p.series_id for p in points],
        **{m: [getattr(p, m) for p in points] for m in MEASURES},
        "resolution": FINE.resolution_s,
        "start": FINE.block_start(at),
        "slot": FINE.slot(at),
    }
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(source), params)


def roll_up_minute(minute: datetime, ticks: int) -> int:
    """Roll the fine points of ``[minute, minute + 60 s)`` into the coarse point of that
    minute: rates are the mean over the ``ticks`` collections made in the minute (a tick
    without a point was idle: 0), lags the maximum. Returns the rows written."""
    first = FINE.slot(minute)
    last = first + COARSE.resolution_s // FINE.resolution_s - 1
    span = f"[{first}:{last}]"

    def mean(m: str) -> str:
        return f"(SELECT sum(x) / %(ticks)s FROM unnest(f.{m}{span}) x) AS {m}"

    def peak(m: str) -> str:
        return f"(SELECT max(x) FROM unnest(f.{m}{span}) x) AS {m}"

    columns = [mean("records_per_s"), mean("bytes_per_s"), peak("lag_records"), peak("lag_s")]
    source = (
        f"SELECT * FROM (SELECT f.series_id, {', '.join(columns)} "
        f"FROM {Block._meta.db_table} f "
        "WHERE f.resolution_s = %(fine)s AND f.start = %(fine_start)s) AS r "
        f"WHERE {' OR '.join(f'r.{m} IS NOT NULL' for m in MEASURES)}"
    )
    params: dict[str, Any] = {
        "ticks": float(ticks),
        "fine": FINE.resolution_s,
        "fine_start": FINE.block_start(minute),
        "resolution": COARSE.resolution_s,
        "start": COARSE.block_start(minute),
        "slot": COARSE.slot(minute),
    }
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(source), params)
        return int(cursor.rowcount)


def prune(now: datetime) -> dict[str, int]:
    """Delete blocks wholly older than their tier's retention, collections older than
    the coarse retention, and series left without blocks. Returns counts deleted."""
    deleted = {tier_name(t): _prune_tier(t, now) for t in (FINE, COARSE)}
    deleted["collections"] = Collection.objects.filter(at__lt=now - COARSE.retention).delete()[0]
    deleted["series"] = Series.objects.filter(
        blocks__isnull=True, created_at__lt=now - FINE.retention
    ).delete()[0]
    return deleted


def _prune_tier(tier: Tier, now: datetime) -> int:
    cutoff = tier.block_start(now - tier.retention)
    return Block.objects.filter(resolution_s=tier.resolution_s, start__lt=cutoff).delete()[0]


def tier_name(tier: Tier) -> str:
    return f"blocks_{tier.resolution_s}s"
