"""Rate and lag history for the console's chart tests, written through the metrics
service as collections would: one observation every 10 s over the last ``minutes``,
then the roll-up into the 1-minute tier (so the day's charts have it too)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.utils import timezone

from controlplane.metrics import services
from controlplane.metrics.collect import GroupCounters, MirrorLag, Observation, TopicCounters
from controlplane.metrics.tiers import FINE

RECORD_BYTES = 100


def seed_history(
    topics: dict[str, float],
    groups: dict[str, str] | None = None,
    *,
    mirrors: dict[tuple[str, str], int] | None = None,
    minutes: int = 60,
    now: datetime | None = None,
) -> datetime:
    """``topics``: produce rate (records/s, wobbling around it) by topic; ``groups``:
    group -> the topic it consumes, at about half the produce rate, so its lag grows;
    ``mirrors``: the lag in records (wobbling around it; a second per 100 records) by
    (``<tenant>.<link>``, ``<from>><to>``). Returns the last instant written."""
    groups = groups or {}
    mirrors = mirrors or {}
    now = now or timezone.now()
    # One tick before the window: the first observation has no rate, only counters.
    first = FINE.point_start(now - timedelta(minutes=minutes, seconds=FINE.resolution_s))
    ends = dict.fromkeys(topics, 0)
    committed = dict.fromkeys(groups, 0)
    at = first
    for tick in range(minutes * 6 + 1):
        at = first + timedelta(seconds=tick * FINE.resolution_s)
        for phase, (name, rate) in enumerate(topics.items()):
            wobble = 0.35 * math.sin(tick / 25 + phase) + 0.1 * math.sin(tick / 4 + 2 * phase)
            ends[name] += int(rate * (1 + wobble) * FINE.resolution_s)
        for group, topic in groups.items():
            committed[group] = max(committed[group], int(ends[topic] * 0.5))
        observation = Observation(
            topics={n: TopicCounters(e, e * RECORD_BYTES) for n, e in ends.items()},
            groups={
                (g, t): GroupCounters({0: committed[g]}, ends[t] - committed[g])
                for g, t in groups.items()
            },
            mirrors={
                key: MirrorLag(int(lag * (1 + 0.5 * math.sin(tick / 9))), lag / 100)
                for key, lag in mirrors.items()
            },
        )
        services.record_observation(observation, at)
    services.roll_up_metrics(at + timedelta(minutes=2))
    return at
