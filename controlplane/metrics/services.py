"""Collecting, rolling up, pruning and reading rate and lag history.

A collection turns counters into rates: the delta of a counter since the run that last
read it, over the time between the two reads (the counters and their read times are kept
in ``CollectorState``; a counter that could not be read is carried with its old time, so
the next rate spans the gap). A series whose rates and lag are all 0 is idle and gets no
point: the ``Collection`` row of the run says the instant was measured, and reads answer
0 there (a series with no point at an unmeasured instant answers null).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Max, Sum
from django.utils import timezone

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.errors import NotFound
from controlplane.metrics import collect, history, store
from controlplane.metrics.choices import SeriesKind
from controlplane.metrics.collect import MirrorLag, Observation
from controlplane.metrics.models import Block, Collection, CollectorState, Series
from controlplane.metrics.store import Point
from controlplane.metrics.tiers import COARSE, FINE
from controlplane.mirrors.models import MirrorPartition
from controlplane.regions.models import Broker
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from controlplane.topics.placement import UNPLACEABLE_PHASES

SeriesKey = tuple[str, str, str]  # (kind, topic, group)


def collect_metrics(now: datetime | None = None) -> Collection | None:
    """One collection run over every live broker of every cluster. Returns its
    ``Collection``, or None when a later run has already written (this one is stale)."""
    started = time.monotonic()
    live = Broker.objects.exclude(phase__in=UNPLACEABLE_PHASES).exclude(port=None)
    origins = Topic.objects.origins().values_list("full_name", "partitions", "cluster_id")
    topics = {name: partitions for name, partitions, _ in origins}
    clusters = {name: cluster for name, _, cluster in origins if cluster is not None}
    observation = collect.observe(live, topics, clusters)
    observation.mirrors = mirror_lags()
    return record_observation(observation, now or timezone.now(), started)


def mirror_lags() -> dict[tuple[str, str], MirrorLag]:
    """Each mirror link leg's lag, from what its worker last reported (the rows the
    controllers keep), by (``<tenant>.<link>``, ``<from>><to>``)."""
    rows = (
        MirrorPartition.objects.values(
            "link__tenant__slug", "link__name", "from_region__name", "to_region__name"
        )
        .annotate(records=Sum("lag_records"), seconds=Max("lag_seconds"))
        .order_by()
    )
    return {
        (f"{r['link__tenant__slug']}.{r['link__name']}",
         f"{r['from_region__name']}>{r['to_region__name']}"):
        MirrorLag(int(r["records"] or 0), float(r["seconds"] or 0.0))
        for r in rows
    }  # fmt: skip


def record_observation(
    observation: Observation, now: datetime, started: float | None = None
) -> Collection | None:
    """Turn ``observation`` (read at ``now``) into points and store them (see the module
    docstring). Atomic; serialized with every other run by the state row's lock."""
    with transaction.atomic():
        state = _locked_state()
        previous = _counters(state)
        if previous.get("at", 0) >= now.timestamp():
            return None
        counters, rates = _rates(observation, previous, now.timestamp())
        points = _points(rates, observation)
        store.write_points(now, points)
        state.counters = counters
        state.generation += 1
        state.save(update_fields=["counters", "generation", "updated_at"])
        _cache.update(generation=state.generation, counters=counters)
        elapsed_ms = int((time.monotonic() - started) * 1000) if started is not None else 0
        return Collection.objects.create(
            at=now,
            brokers_asked=observation.brokers_asked,
            brokers_answered=observation.brokers_answered,
            points_written=len(points),
            duration_ms=elapsed_ms,
        )


def _locked_state() -> CollectorState:
    """The state row, locked; its counters are not loaded (see ``_counters``)."""
    CollectorState.objects.get_or_create(pk=1)
    return CollectorState.objects.select_for_update().defer("counters").get(pk=1)


# The counters this process wrote last, by the state's generation: a worker running
# consecutive collections skips reading back (and parsing) its own megabyte of JSON.
_cache: dict[str, Any] = {"generation": -1, "counters": {}}


def _counters(state: CollectorState) -> dict[str, Any]:
    if _cache["generation"] != state.generation:
        loaded = CollectorState.objects.values_list("counters", flat=True).get(pk=1)
        _cache.update(generation=state.generation, counters=loaded or {})
    counters: dict[str, Any] = _cache["counters"]
    return counters


Rates = dict[SeriesKey, dict[str, float | None]]


def _rates(
    observation: Observation, previous: dict[str, Any], now_s: float
) -> tuple[dict[str, Any], Rates]:
    """The new counters (read ones at ``now_s``, unread ones carried) and the values of
    every non-idle series."""
    before_topics: dict[str, list[float]] = previous.get("topics", {})
    before_groups: dict[str, list[Any]] = previous.get("groups", {})
    # Counters not read for an hour (a deleted topic or group) are dropped, not carried.
    fresh = now_s - FINE.retention.total_seconds()
    topics = {k: v for k, v in before_topics.items() if v[0] > fresh}
    groups = {k: v for k, v in before_groups.items() if v[0] > fresh}
    mirrors = {k: v for k, v in previous.get("mirrors", {}).items() if v > fresh}
    rates: Rates = {}
    for name, counters in observation.topics.items():
        topics[name] = [now_s, counters.end_offset, counters.size_bytes]
        if (last := before_topics.get(name)) is not None and now_s > last[0]:
            span = now_s - last[0]
            values = {
                "records_per_s": max(0, counters.end_offset - last[1]) / span,
                "bytes_per_s": max(0, counters.size_bytes - last[2]) / span,
            }
            if any(values.values()):
                rates[(SeriesKind.TOPIC, name, "")] = dict(values)
    for (group, topic), used in observation.groups.items():
        key = f"{group}\n{topic}"
        groups[key] = [now_s, {str(p): o for p, o in used.committed.items()}]
        last = before_groups.get(key)
        consumed = 0.0
        if last is not None and now_s > last[0] and isinstance(last[1], dict):
            consumed = _consumed(used.committed, last[1]) / (now_s - last[0])
        if consumed or used.lag_records or used.lag_s:
            rates[(SeriesKind.GROUP, topic, group)] = {
                "records_per_s": consumed,
                "lag_records": float(used.lag_records),
                "lag_s": used.lag_s,
            }
    for (link, leg), lag in observation.mirrors.items():
        mirrors[f"{link}\n{leg}"] = now_s  # only when it was seen: prune keeps its series
        if lag.lag_records or lag.lag_s:
            rates[(SeriesKind.MIRROR, leg, link)] = {
                "lag_records": float(lag.lag_records),
                "lag_s": lag.lag_s,
            }
    return {"at": now_s, "topics": topics, "groups": groups, "mirrors": mirrors}, rates


def _consumed(committed: dict[int, int], before: dict[str, int]) -> int:
    """Records consumed between two readings: the forward moves of the partitions
    committed in both (a partition's first commit, or one moved back, adds nothing)."""
    return sum(
        max(0, offset - before[str(partition)])
        for partition, offset in committed.items()
        if str(partition) in before
    )


def _points(rates: Rates, observation: Observation) -> list[Point]:
    # Every group seen gets its series, idle or not: the group is then known to reads
    # (its charts answer zeros) rather than missing.
    groups = {(SeriesKind.GROUP, topic, group) for group, topic in observation.groups}
    groups |= {(SeriesKind.MIRROR, leg, link) for link, leg in observation.mirrors}
    ids = series_ids(rates.keys() | groups)
    return [Point(ids[key], **values) for key, values in rates.items() if key in ids]


def series_ids(keys: Iterable[SeriesKey]) -> dict[SeriesKey, int]:
    """The ids of the series of ``keys`` in the tenants that now hold their names' slugs,
    creating the missing ones. A key whose slug no tenant holds has no series."""
    owners = _owners({_slug(topic, group) for _, topic, group in keys})
    wanted = {(owners[_slug(t, g)], k, t, g) for k, t, g in keys if _slug(t, g) in owners}
    if not wanted:
        return {}
    known = _known_series(wanted)
    missing = wanted - known.keys()
    if missing:
        Series.objects.bulk_create(
            [Series(tenant_id=o, kind=k, topic=t, group=g) for o, k, t, g in missing],
            ignore_conflicts=True,
        )
        known |= _known_series(missing)
    return {(k, t, g): pk for (_, k, t, g), pk in known.items()}


OwnedKey = tuple[int, str, str, str]  # (tenant id, kind, topic, group)


def _owners(slugs: set[str]) -> dict[str, int]:
    """The id of the tenant holding each slug (all of them: a narrow table, read whole)."""
    rows = Tenant.objects.values_list("slug", "pk")
    return {slug: pk for slug, pk in rows.iterator(2000) if slug in slugs}


def _known_series(keys: set[OwnedKey]) -> dict[OwnedKey, int]:
    # Every series, not an IN list of thousands of names: one scan of a narrow table is
    # cheaper, and there are about as many series as active ones.
    rows = Series.objects.values_list("tenant_id", "kind", "topic", "group", "id")
    return {(o, k, t, g): pk for o, k, t, g, pk in rows.iterator(2000) if (o, k, t, g) in keys}


def _slug(topic: str, group: str) -> str:
    """The tenant slug a topic's or group's name starts with."""
    return (group or topic).partition(".")[0]


def roll_up_metrics(now: datetime | None = None) -> int:
    """Roll every finished minute not yet rolled (within the fine tier's retention) into
    the coarse tier. Returns the minutes rolled."""
    now = now or timezone.now()
    # The last tick of a minute may still be writing when it ends: wait one interval.
    until = COARSE.point_start(now - timedelta(seconds=FINE.resolution_s))
    with transaction.atomic():
        state = _locked_state()
        minute = max(
            state.rolled_until or until - FINE.retention,
            COARSE.point_start(now - FINE.retention),
        )
        rolled = 0
        for at, ticks in _ticks_by_minute(minute, until).items():
            store.roll_up_minute(at, ticks)
            rolled += 1
        state.rolled_until = until
        state.save(update_fields=["rolled_until", "updated_at"])
    return rolled


def _ticks_by_minute(since: datetime, until: datetime) -> dict[datetime, int]:
    counts: dict[datetime, int] = {}
    for at in Collection.objects.filter(at__gte=since, at__lt=until).values_list("at", flat=True):
        minute = COARSE.point_start(at)
        counts[minute] = counts.get(minute, 0) + 1
    return counts


def prune_metrics(now: datetime | None = None) -> dict[str, int]:
    """Delete what the tiers' retentions have passed (see ``store.prune``). Holds the
    state lock: a series a collection is about to write must not vanish under it."""
    with transaction.atomic():
        counters = _counters(_locked_state())
        seen: set[tuple[str, ...]] = {("", t) for t in counters.get("topics", {})}
        seen |= {tuple(k.split("\n", 1)) for k in counters.get("groups", {})}
        seen |= {tuple(k.split("\n", 1)) for k in counters.get("mirrors", {})}
        return store.prune(now or timezone.now(), seen)


TOPIC_MEASURES = ("records_per_s", "bytes_per_s")
GROUP_MEASURES = ("records_per_s", "lag_records", "lag_s")
MIRROR_MEASURES = ("lag_records", "lag_s")


def topic_metrics(
    actor: Actor,
    full_name: str,
    since: datetime | None,
    until: datetime | None,
    step_s: int | None,
) -> dict[str, Any]:
    """Produce rates of a topic the actor may read; another tenant's topic is missing."""
    query = history.plan(since, until, step_s, timezone.now())
    topic = Topic.objects.select_related("tenant").named(full_name).first()
    if topic is None or not actor.can(topic.tenant.slug, Role.VIEWER):
        raise NotFound(f"topic {full_name!r} not found")
    series = Series.objects.filter(
        tenant_id=topic.tenant_id, kind=SeriesKind.TOPIC, topic=full_name
    ).first()
    points = history.series_points(query, series.pk if series else None, TOPIC_MEASURES)
    return {"topic": full_name, **_frame(query), "points": _rows(points)}


def group_metrics(
    actor: Actor,
    group: str,
    since: datetime | None,
    until: datetime | None,
    step_s: int | None,
) -> dict[str, Any]:
    """Consume rates and lag of a group the actor may read, per topic it committed
    offsets of; a group never seen (or another tenant's) is missing."""
    query = history.plan(since, until, step_s, timezone.now())
    tenant = _readable_tenant(actor, _slug("", group))
    owned = Series.objects.filter(tenant=tenant, kind=SeriesKind.GROUP, group=group)
    series = list(owned.order_by("topic")) if tenant is not None else []
    if not series:
        raise NotFound(f"group {group!r} not found")
    topics = [
        {"topic": s.topic, "points": _rows(history.series_points(query, s.pk, GROUP_MEASURES))}
        for s in series
    ]
    return {"group": group, **_frame(query), "topics": topics}


def mirror_metrics(
    actor: Actor,
    tenant_slug: str,
    link: str,
    since: datetime | None,
    until: datetime | None,
    step_s: int | None,
) -> dict[str, Any]:
    """Lag of a mirror link the actor may read, per leg (``from_region``, ``to_region``):
    records behind (the sum over the leg's partitions) and seconds behind (the largest);
    a link never seen (or another tenant's) is missing."""
    query = history.plan(since, until, step_s, timezone.now())
    tenant = _readable_tenant(actor, tenant_slug)
    name = f"{tenant_slug}.{link}"
    owned = Series.objects.filter(tenant=tenant, kind=SeriesKind.MIRROR, group=name)
    series = list(owned.order_by("topic")) if tenant is not None else []
    if not series:
        raise NotFound(f"mirror {link!r} not found")
    legs = [
        {"from_region": s.topic.partition(">")[0], "to_region": s.topic.partition(">")[2],
         "points": _rows(history.series_points(query, s.pk, MIRROR_MEASURES))}
        for s in series
    ]  # fmt: skip
    return {"mirror": link, **_frame(query), "legs": legs}


def _readable_tenant(actor: Actor, slug: str) -> Tenant | None:
    """The tenant now holding ``slug``, when the actor may read it (else None)."""
    if not actor.can(slug, Role.VIEWER):
        return None
    return Tenant.objects.filter(slug=slug).first()


def _frame(query: history.Query) -> dict[str, Any]:
    return {
        "from": query.since,
        "to": query.until,
        "step": query.step_s,
        "resolution": query.tier.resolution_s,
    }


def _rows(points: list[tuple[datetime, dict[str, float | None]]]) -> list[dict[str, Any]]:
    return [{"at": at, **values} for at, values in points]


def topic_consume_metrics(
    actor: Actor,
    full_name: str,
    since: datetime | None,
    until: datetime | None,
    step_s: int | None,
) -> dict[str, Any]:
    """Consume rate of a topic the actor may read: the sum, per step, of the consume
    rates of every group that committed offsets on it (null where no group's is known)."""
    query = history.plan(since, until, step_s, timezone.now())
    topic = Topic.objects.select_related("tenant").named(full_name).first()
    if topic is None or not actor.can(topic.tenant.slug, Role.VIEWER):
        raise NotFound(f"topic {full_name!r} not found")
    ids = Series.objects.filter(
        tenant_id=topic.tenant_id, kind=SeriesKind.GROUP, topic=full_name
    ).values_list("pk", flat=True)
    return {"topic": full_name, **_frame(query), "points": _summed(query, list(ids))}


def busiest_topics(
    actor: Actor,
    tenant_slug: str,
    since: datetime | None,
    until: datetime | None,
    step_s: int | None,
    limit: int,
) -> dict[str, Any]:
    """The ``limit`` topics of a tenant the actor may read with the most records
    produced over the range (topics with none are left out), each with its produce rate
    and its consume rate (the sum over its groups), busiest first."""
    query = history.plan(since, until, step_s, timezone.now())
    tenant = _readable_tenant(actor, tenant_slug)
    if tenant is None:
        raise NotFound(f"tenant {tenant_slug!r} not found")
    owned = Series.objects.filter(tenant=tenant)
    topic_series = dict(owned.filter(kind=SeriesKind.TOPIC).values_list("pk", "topic"))
    produced = _records_stored(query, topic_series.keys())
    ranked = sorted((-total, topic_series[pk], pk) for pk, total in produced.items() if total > 0)
    topics = []
    for _, name, pk in ranked[:limit]:
        groups = owned.filter(kind=SeriesKind.GROUP, topic=name).values_list("pk", flat=True)
        produce = history.series_points(query, pk, ("records_per_s",))
        topics.append(
            {
                "topic": name,
                "produce": _rows(produce),
                "consume": _summed(query, list(groups)),
            }
        )
    return {"tenant": tenant_slug, **_frame(query), "topics": topics}


def _records_stored(query: history.Query, series_ids: Iterable[int]) -> dict[int, float]:
    """Per series, the sum of the stored ``records_per_s`` of the tier's blocks touching
    the range: enough to rank topics (a ranking, not a figure anyone reads)."""
    tier = query.tier
    blocks = Block.objects.filter(
        series_id__in=list(series_ids),
        resolution_s=tier.resolution_s,
        start__gte=tier.block_start(query.since),
        start__lt=query.until,
    ).values_list("series_id", "records_per_s")
    totals: dict[int, float] = {}
    for series_id, values in blocks.iterator(500):
        totals[series_id] = totals.get(series_id, 0.0) + sum(v for v in values if v is not None)
    return totals


def _summed(query: history.Query, series_ids: list[int]) -> list[dict[str, Any]]:
    """``records_per_s`` summed over ``series_ids`` per answered point (None where no
    series has a value; no series at all: the points of an idle series)."""
    if not series_ids:
        return _rows(history.series_points(query, None, ("records_per_s",)))
    sums: list[tuple[datetime, float | None]] = []
    for series_id in series_ids:
        points = history.series_points(query, series_id, ("records_per_s",))
        if not sums:
            sums = [(at, values["records_per_s"]) for at, values in points]
            continue
        sums = [
            (at, _add(total, values["records_per_s"]))
            for (at, total), (_, values) in zip(sums, points, strict=True)
        ]
    return [{"at": at, "records_per_s": total} for at, total in sums]


def _add(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else a + b
