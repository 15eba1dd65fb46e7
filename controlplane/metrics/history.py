"""Reading history: the points of a series over a range, at the best tier for it.

A query names ``[since, until)`` and a ``step`` (seconds, a multiple of the tier's
resolution). The tier is the finest still holding ``since`` (``tiers.tier_for``); each
answered point covers one step: rates are the mean of the tier's points in it, lags the
maximum. A tier point at an instant some collection measured but with no stored value
was idle (0); at an instant no collection measured it is unknown (null).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models.functions import TruncMinute

from controlplane.core.errors import InvalidRequest
from controlplane.metrics.models import Block, Collection, CollectorState
from controlplane.metrics.store import MEAN
from controlplane.metrics.tiers import COARSE, FINE, Tier, tier_for

MAX_RANGE = COARSE.retention
MAX_POINTS = 1_500
DEFAULT_POINTS = 360
# The instants a range may name: nothing is stored before the Unix epoch, and the
# arithmetic of a range (a step past its end, a block's start) must stay far inside
# the largest datetime, where Python would overflow.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
MAX_STEP_S = int(MAX_RANGE.total_seconds())
BOUNDS = f"must be between {EARLIEST:%Y-%m-%dT%H:%M:%SZ} and {LATEST:%Y-%m-%dT%H:%M:%SZ}"

# What an idle series (no point at a measured instant) had: 0. Lag in seconds is not
# inferred: brokers may not report it at all.
IDLE_ZERO = frozenset({"records_per_s", "bytes_per_s", "lag_records"})


class InvalidRange(InvalidRequest):
    """``from`` is after ``to``, or either is outside ``[EARLIEST, LATEST]``."""

    code = "invalid_range"


class RangeTooLong(InvalidRequest):
    """The range is longer than the history kept, or would answer too many points."""

    code = "range_too_long"


class InvalidStep(InvalidRequest):
    """``step`` is not a positive multiple of the chosen tier's resolution."""

    code = "invalid_step"


@dataclass(frozen=True)
class Query:
    since: datetime
    until: datetime
    step_s: int
    tier: Tier


def plan(
    since: datetime | None, until: datetime | None, step_s: int | None, now: datetime
) -> Query:
    """Validate a range and step against the tiers (default: the hour up to ``now``);
    raises the typed errors above."""
    for name, value in (("from", since), ("to", until)):
        if value is not None and not EARLIEST <= value <= LATEST:
            raise InvalidRange(f"'{name}' {BOUNDS}", **{name: value.isoformat()})
    if step_s is not None and step_s > MAX_STEP_S:
        raise InvalidStep(f"'step' is at most {MAX_STEP_S} s", step=step_s)
    until = until or now
    since = since or until - FINE.retention
    if since > until:
        raise InvalidRange("'from' is after 'to'", **{"from": since.isoformat()})
    if until - since > MAX_RANGE:
        raise RangeTooLong(
            f"at most {MAX_RANGE.days} days of history are kept",
            max_range_s=int(MAX_RANGE.total_seconds()),
        )
    tier = tier_for(since, now)
    span_s = max(1, math.ceil((until - since).total_seconds()))
    if step_s is None:
        steps = math.ceil(span_s / (tier.resolution_s * DEFAULT_POINTS))
        step_s = tier.resolution_s * max(1, steps)
    if step_s <= 0 or step_s % tier.resolution_s:
        raise InvalidStep(
            f"'step' must be a positive multiple of {tier.resolution_s} s for this range",
            step=step_s,
            resolution_s=tier.resolution_s,
        )
    if span_s / step_s > MAX_POINTS:
        raise RangeTooLong(
            f"at most {MAX_POINTS} points per answer: use a larger 'step'",
            max_points=MAX_POINTS,
        )
    return Query(tier.point_start(since), until, step_s, tier)


Values = dict[str, float | None]


def series_points(
    query: Query, series_id: int | None, measures: Sequence[str]
) -> list[tuple[datetime, Values]]:
    """The answered points of a series (None: a series never stored, all idle)."""
    stored = _stored(query, series_id, measures)
    measured = _measured(query)
    answered = []
    step = timedelta(seconds=query.step_s)
    at = query.since
    while at < query.until:
        instants = _instants(at, min(at + step, query.until), query.tier)
        answered.append((at, _combine(instants, stored, measured, measures)))
        at += step
    return answered


def _instants(start: datetime, end: datetime, tier: Tier) -> list[int]:
    first, last = int(start.timestamp()), int(end.timestamp())
    return list(range(first, last, tier.resolution_s))


def _combine(
    instants: Iterable[int],
    stored: dict[int, Values],
    measured: set[int],
    measures: Sequence[str],
) -> Values:
    seen: dict[str, list[float]] = {m: [] for m in measures}
    for instant in instants:
        values = stored.get(instant)
        for m in measures:
            value = values.get(m) if values else None
            if value is None and instant in measured and m in IDLE_ZERO:
                value = 0.0
            if value is not None:
                seen[m].append(value)
    return {m: _reduce(m, seen[m]) for m in measures}


def _reduce(measure: str, values: list[float]) -> float | None:
    if not values:
        return None
    return sum(values) / len(values) if measure in MEAN else max(values)


def _stored(query: Query, series_id: int | None, measures: Sequence[str]) -> dict[int, Values]:
    if series_id is None:
        return {}
    tier = query.tier
    blocks = Block.objects.filter(
        series_id=series_id,
        resolution_s=tier.resolution_s,
        start__gte=tier.block_start(query.since),
        start__lt=query.until,
    ).values_list("start", *measures)
    stored: dict[int, Values] = {}
    for start, *arrays in blocks:
        base = int(start.timestamp())
        for slot in range(tier.slots):
            values = {m: a[slot] for m, a in zip(measures, arrays, strict=True)}
            if any(v is not None for v in values.values()):
                stored[base + slot * tier.resolution_s] = values
    return stored


def _measured(query: Query) -> set[int]:
    """The tier instants some collection measured in the query's range (for the coarse
    tier, only minutes already rolled up: a later one has no stored point yet)."""
    ats = Collection.objects.filter(at__gte=query.since, at__lt=query.until)
    if query.tier is FINE:
        return {int(FINE.point_start(at).timestamp()) for at in ats.values_list("at", flat=True)}
    rolled = CollectorState.objects.filter(pk=1).values_list("rolled_until", flat=True).first()
    if rolled is None:
        return set()
    minutes = ats.filter(at__lt=rolled).annotate(minute=TruncMinute("at"))
    return {int(m.timestamp()) for m in minutes.values_list("minute", flat=True).distinct()}
