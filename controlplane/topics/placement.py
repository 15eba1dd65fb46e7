"""Placement: which broker of a topic's cluster hosts each of its partitions.

The rule, deterministic for a given state (no randomness, so a retry or a replay places
the same way): each new partition goes to the broker with the fewest assigned
partitions, then the fewest bytes (the ``size_bytes`` the reconciler last observed),
then the lowest broker id; and never to the broker that got the topic's previous
partition when another broker can take it, so consecutive partitions of one topic land
on different brokers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, Sum

from controlplane.core.errors import Unavailable
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker
from controlplane.topics.models import PartitionAssignment, Topic

# Brokers that will not host new partitions: on their way out, or gone.
UNPLACEABLE_PHASES = (BrokerPhase.STOPPING, BrokerPhase.STOPPED)


class NoBrokerAvailable(Unavailable):
    """The topic's cluster has no broker that can host partitions (yet)."""

    code = "no_broker_available"


@dataclass(frozen=True)
class BrokerLoad:
    """What a broker already hosts: partitions of every topic and their bytes."""

    broker_id: int
    partitions: int
    size_bytes: int


def plan_placement(loads: Iterable[BrokerLoad], count: int) -> list[int]:
    """The broker (its ``BrokerLoad.broker_id``) for each of ``count`` consecutive new
    partitions of one topic, following the module's rule. Pure: ``loads`` is not
    changed. Raises ``NoBrokerAvailable`` when ``loads`` is empty and ``count > 0``."""
    current = {load.broker_id: [load.partitions, load.size_bytes] for load in loads}
    if count > 0 and not current:
        raise NoBrokerAvailable("no broker of the cluster can host partitions")
    chosen: list[int] = []
    previous: int | None = None
    for _ in range(count):
        candidates = [b for b in current if b != previous] or list(current)
        broker_id = min(candidates, key=lambda b: (current[b][0], current[b][1], b))
        current[broker_id][0] += 1  # a new partition holds no bytes yet
        chosen.append(broker_id)
        previous = broker_id
    return chosen


def broker_loads(brokers: Sequence[Broker]) -> list[BrokerLoad]:
    """The load of each of ``brokers`` (of one cluster), keyed by its ``broker_id``."""
    rows = (
        PartitionAssignment.objects.filter(broker__in=brokers)
        .values("broker")
        .annotate(partitions=Count("id"), size_bytes=Sum("size_bytes"))
    )
    by_pk: dict[int, tuple[int, int]] = {
        row["broker"]: (row["partitions"], row["size_bytes"] or 0) for row in rows
    }
    return [BrokerLoad(b.broker_id, *by_pk.get(b.pk, (0, 0))) for b in brokers]


def placeable_brokers(topic: Topic) -> list[Broker]:
    """The brokers of the topic's cluster that may take new partitions, locked (on
    Postgres) so concurrent placements in one cluster see each other's rows."""
    return list(
        Broker.objects.select_for_update()
        .filter(cluster_id=topic.cluster_id)
        .exclude(phase__in=UNPLACEABLE_PHASES)
        .order_by("broker_id")
    )


def assign_partitions(topic: Topic) -> list[PartitionAssignment]:
    """Create the ``PartitionAssignment`` rows for the topic's partitions that have
    none (``[assigned, topic.partitions)`` when partitions only grow) and return them,
    ordered by partition. Idempotent: a topic whose partitions are all assigned gets
    ``[]``. Runs in (or opens) a transaction; the caller audits the change it is part
    of. Raises ``NoBrokerAvailable`` when the cluster has no placeable broker."""
    with transaction.atomic():
        assigned = set(topic.assignments.values_list("partition", flat=True))
        missing = [p for p in range(topic.partitions) if p not in assigned]
        if not missing:
            return []
        brokers = placeable_brokers(topic)
        plan = plan_placement(broker_loads(brokers), len(missing))
        pk_of = {b.broker_id: b.pk for b in brokers}
        rows = [
            PartitionAssignment(topic=topic, partition=p, broker_id=pk_of[b])
            for p, b in zip(missing, plan, strict=True)
        ]
        PartitionAssignment.objects.bulk_create(rows)
        return rows
