"""Placement: which brokers of a topic's cluster hold each of its partitions.

A partition is held by ``replication_factor`` distinct brokers, its replicas; the first
is its preferred leader. The rule, deterministic for a given state (no randomness, so a
retry or a replay places the same way):

- the preferred leader of each new partition is the broker holding the fewest replicas,
  then leading (preferring) the fewest partitions, then holding the fewest bytes (the
  ``size_bytes`` the reconciler last observed), then the lowest broker id; and never the
  broker that got the topic's previous partition when another broker can take it, so
  consecutive partitions of one topic are led by different brokers;
- each further replica goes to the broker, among those not holding the partition yet,
  holding the fewest replicas, then the fewest bytes, then the lowest id.

With replication factor 1 this is the placement of one broker per partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from controlplane.core.errors import Unavailable
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker
from controlplane.topics.models import PartitionAssignment, Topic

# Brokers that will not host new partitions: on their way out, or gone.
UNPLACEABLE_PHASES = (
    BrokerPhase.STOPPING,
    BrokerPhase.STOPPED,
    BrokerPhase.DECOMMISSIONING,
    BrokerPhase.DECOMMISSIONED,
)


class NoBrokerAvailable(Unavailable):
    """The topic's cluster has no broker that can host partitions (yet)."""

    code = "no_broker_available"


@dataclass(frozen=True)
class BrokerLoad:
    """What a broker already holds: replicas of every topic (``partitions``), their
    bytes, and how many partitions prefer it as leader."""

    broker_id: int
    partitions: int
    size_bytes: int
    leaders: int = 0


def plan_replicas(
    loads: Iterable[BrokerLoad], count: int, replication_factor: int = 1
) -> list[list[int]]:
    """The replicas (broker ids, preferred leader first) of each of ``count``
    consecutive new partitions of one topic, following the module's rule. Pure:
    ``loads`` is not changed. Raises ``NoBrokerAvailable`` when fewer brokers than
    ``replication_factor`` are given and ``count > 0``."""
    current = {load.broker_id: [load.partitions, load.size_bytes, load.leaders] for load in loads}
    if count > 0 and len(current) < max(replication_factor, 1):
        raise NoBrokerAvailable(
            f"{len(current)} broker(s) of the cluster can host partitions, "
            f"{replication_factor} replicas asked"
        )
    plans: list[list[int]] = []
    previous: int | None = None
    for _ in range(count):
        candidates = [b for b in current if b != previous] or list(current)
        leader = min(candidates, key=lambda b: (current[b][0], current[b][2], current[b][1], b))
        replicas = [leader]
        while len(replicas) < replication_factor:
            rest = [b for b in current if b not in replicas]
            replicas.append(min(rest, key=lambda b: (current[b][0], current[b][1], b)))
        for broker_id in replicas:
            current[broker_id][0] += 1  # a new partition holds no bytes yet
        current[leader][2] += 1
        plans.append(replicas)
        previous = leader
    return plans


def plan_placement(loads: Iterable[BrokerLoad], count: int) -> list[int]:
    """The preferred leader (a ``BrokerLoad.broker_id``) of each of ``count``
    consecutive new partitions of one topic of replication factor 1. Raises
    ``NoBrokerAvailable`` when ``loads`` is empty and ``count > 0``."""
    return [replicas[0] for replicas in plan_replicas(loads, count, 1)]


def broker_loads(brokers: Sequence[Broker]) -> list[BrokerLoad]:
    """The load of each of ``brokers`` (of one cluster), keyed by its ``broker_id``."""
    ids = {b.broker_id for b in brokers}
    held: dict[int, list[int]] = {i: [0, 0, 0] for i in ids}
    rows = PartitionAssignment.objects.filter(
        topic__cluster_id__in={b.cluster_id for b in brokers}
    ).values_list("replicas", "size_bytes")
    for replicas, size_bytes in rows:
        for position, broker_id in enumerate(replicas or []):
            if broker_id in held:
                held[broker_id][0] += 1
                held[broker_id][1] += size_bytes or 0
                held[broker_id][2] += position == 0
    return [BrokerLoad(b.broker_id, held[b.broker_id][0], held[b.broker_id][1],
                       held[b.broker_id][2]) for b in brokers]  # fmt: skip


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
    none (``[assigned, topic.partitions)`` when partitions only grow), each with
    ``topic.replication_factor`` replicas, all of them in the ISR (an empty partition
    is in sync everywhere), and return them, ordered by partition. Idempotent: a topic
    whose partitions are all assigned gets ``[]``. Runs in (or opens) a transaction;
    the caller audits the change it is part of. Raises ``NoBrokerAvailable`` when the
    cluster has fewer placeable brokers than the replication factor."""
    with transaction.atomic():
        assigned = set(topic.assignments.values_list("partition", flat=True))
        missing = [p for p in range(topic.partitions) if p not in assigned]
        if not missing:
            return []
        brokers = prefer_answering(placeable_brokers(topic), topic.replication_factor)
        plans = plan_replicas(broker_loads(brokers), len(missing), topic.replication_factor)
        pk_of = {b.broker_id: b.pk for b in brokers}
        rows = [
            PartitionAssignment(
                topic=topic,
                partition=p,
                broker_id=pk_of[replicas[0]],
                replicas=replicas,
                isr=list(replicas),
            )
            for p, replicas in zip(missing, plans, strict=True)
        ]
        PartitionAssignment.objects.bulk_create(rows)
        return rows


def prefer_answering(brokers: list[Broker], needed: int) -> list[Broker]:
    """``brokers`` without the unreachable ones when at least ``needed`` remain: a new
    replica on a broker that does not answer would keep its topic from becoming ready."""
    answering = [b for b in brokers if b.phase != BrokerPhase.UNREACHABLE]
    return answering if len(answering) >= needed else brokers


def placeable_count(cluster_id: int) -> int:
    """How many brokers of the cluster may hold new replicas."""
    return (
        Broker.objects.filter(cluster_id=cluster_id).exclude(phase__in=UNPLACEABLE_PHASES).count()
    )


def default_replication_factor(cluster_id: int) -> int:
    """``settings.DEFAULT_REPLICATION_FACTOR``, or fewer when the cluster has fewer
    placeable brokers (at least 1)."""
    return max(1, min(int(settings.DEFAULT_REPLICATION_FACTOR), placeable_count(cluster_id)))
