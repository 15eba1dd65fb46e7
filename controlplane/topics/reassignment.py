"""Moving partition replicas between brokers without downtime: reassignment and broker
decommission (Kafka's partition reassignment, driven by the region's controller).

A reassignment of a partition to ``target`` replicas goes through these steps, each
idempotent, so a controller that dies midway leaves a successor to resume:

1. ``reassign_partitions`` (the API, a platform admin) records ``target_replicas`` and
   sets ``replicas`` to the target ones first, then the leaving ones (the old and the new); it
   bumps the topic's generation, so the reconciler creates the partition on the new
   brokers, and the controller's push makes them followers that catch up.
2. ``progress`` (every controller tick): once the topic is ready (the partition exists
   on every replica) and every target replica is in the ISR, ``replicas`` becomes the
   target, the ISR loses the leaving ones, leadership moves (epoch + 1) when the leader
   is leaving, and the leaving brokers go to ``removing_replicas``.
3. ``delete_removed`` (after the controller pushed that change): the partition is
   deleted on each leaving broker; one that does not answer is retried next tick (a
   decommissioned broker that is gone is not waited for).

``decommission_broker`` reassigns every partition off a broker (each replica of it
replaced by the least-loaded broker not already holding the partition) and marks it
``decommissioning``; ``finish_decommissions`` marks it ``decommissioned`` once no
partition names it any more (the controller then stops its process).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence

from django.db import transaction
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import Conflict, InvalidRequest
from controlplane.gateway import admin as broker_rpc
from controlplane.gateway.errors import BrokerRefusedError, BrokerUnavailable
from controlplane.regions import services as regions
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster
from controlplane.topics.choices import TopicStatus
from controlplane.topics.election import finish_reassignment
from controlplane.topics.models import PartitionAssignment, Topic
from controlplane.topics.partitions import save_state, state_of
from controlplane.topics.placement import broker_loads, placeable_brokers, prefer_answering
from controlplane.topics.tasks import reconcile_topic

log = logging.getLogger(__name__)


# -- starting: the API ------------------------------------------------------------------
@transaction.atomic
def reassign_partitions(
    topic: Topic, targets: Mapping[int, Sequence[int]], *, actor: Actor
) -> Topic:
    """Start moving each listed partition of ``topic`` to its target replicas (broker
    ids, the preferred leader first). ``InvalidRequest`` for an unknown partition, a
    target of the wrong size, with duplicates or naming a broker that cannot take
    replicas; ``Conflict`` while the topic is being deleted or one of the partitions is
    already being reassigned. A target equal to the current replicas changes nothing."""
    topic = Topic.objects.select_for_update().get(pk=topic.pk)
    if topic.status == TopicStatus.DELETING:
        raise Conflict(f"topic {topic.full_name!r} is being deleted", status=topic.status)
    allowed = {b.broker_id for b in placeable_brokers(topic)}
    rows = {r.partition: r for r in topic.assignments.select_for_update()}
    before = audit.snapshot(topic)
    changed = [
        _start(rows, partition, list(target), topic.replication_factor, allowed)
        for partition, target in sorted(targets.items())
    ]
    if not any(changed):
        return topic
    topic.generation += 1
    topic.status, topic.status_reason = TopicStatus.PENDING, ""
    topic.save(update_fields=["generation", "status", "status_reason", "updated_at"])
    after = {
        **(audit.snapshot(topic) or {}),
        "targets": {str(p): list(t) for p, t in targets.items()},
    }
    audit.record(actor, "topic.reassign", topic, before=before, after=after, tenant=topic.tenant)
    _reconcile_after_commit(topic.pk)
    return topic


def _start(
    rows: dict[int, PartitionAssignment],
    partition: int,
    target: list[int],
    replication_factor: int,
    allowed: set[int],
) -> bool:
    row = rows.get(partition)
    field = f"partitions[{partition}]"
    if row is None:
        raise InvalidRequest(f"{field}: no such partition", **{field: ["no such partition"]})
    _check_target(field, target, replication_factor, allowed | set(row.replicas))
    if row.target_replicas is not None:
        raise Conflict(
            f"partition {partition} is already being reassigned to {row.target_replicas}",
            partition=partition,
            target_replicas=row.target_replicas,
        )
    if target == list(row.replicas):
        return False
    row.target_replicas = target
    row.replicas = target + [b for b in row.replicas if b not in target]
    row.broker = Broker.objects.get(cluster_id=row.broker.cluster_id, broker_id=target[0])
    row.save(update_fields=["target_replicas", "replicas", "broker", "updated_at"])
    return True


def _check_target(field: str, target: list[int], size: int, valid: set[int]) -> None:
    """``valid``: brokers that may be replicas (placeable ones, and the current ones)."""
    if len(target) != size or len(set(target)) != size:
        message = f"{size} distinct broker ids (the replication factor)"
        raise InvalidRequest(f"{field}: {message}", **{field: [message]})
    bad = [b for b in target if b not in valid]
    if bad:
        message = f"broker {bad[0]} cannot take replicas"
        raise InvalidRequest(f"{field}: {message}", **{field: [message]})


def _reconcile_after_commit(topic_id: int) -> None:
    def enqueue() -> None:
        reconcile_topic.delay(topic_id)

    transaction.on_commit(enqueue, robust=True)


@transaction.atomic
def decommission_broker(broker: Broker, *, actor: Actor) -> Broker:
    """Move every replica off ``broker`` and mark it ``decommissioning`` (see the module
    docstring); decommissioning it again changes nothing. ``Conflict`` when a partition
    it holds cannot move (no other broker can take it, or it is already being
    reassigned), or the broker is stopped."""
    broker = Broker.objects.select_for_update().get(pk=broker.pk)
    if broker.phase in (BrokerPhase.DECOMMISSIONING, BrokerPhase.DECOMMISSIONED):
        return broker
    if broker.phase in (BrokerPhase.STOPPING, BrokerPhase.STOPPED):
        raise Conflict(f"{broker} is {broker.phase}", phase=broker.phase)
    regions.set_broker_phase(broker, BrokerPhase.DECOMMISSIONING, actor=actor,
                             reason="moving its replicas to other brokers")  # fmt: skip
    by_topic: dict[int, dict[int, list[int]]] = {}
    for row in _rows_naming(broker.cluster, {broker.broker_id}):
        by_topic.setdefault(row.topic_id, {})[row.partition] = []
    for topic in Topic.objects.filter(pk__in=by_topic).order_by("pk"):
        targets = _targets_without(topic, broker.broker_id)
        reassign_partitions(topic, targets, actor=actor)
    return broker


def _targets_without(topic: Topic, broker_id: int) -> dict[int, list[int]]:
    """Per partition of ``topic`` held by ``broker_id``: its replicas with that broker
    replaced by the least-loaded placeable broker not holding the partition (the
    preferred leader's place is kept, so leadership spreads as before)."""
    brokers = prefer_answering(placeable_brokers(topic), topic.replication_factor)
    loads = {load.broker_id: load for load in broker_loads(brokers)}
    targets: dict[int, list[int]] = {}
    for row in topic.assignments.order_by("partition"):
        if broker_id not in row.replicas:
            continue
        free = [b for b in loads if b not in row.replicas]
        if not free:
            raise Conflict(
                f"partition {topic.full_name}-{row.partition} cannot leave broker "
                f"{broker_id}: every other broker already holds it",
                topic=topic.full_name,
                partition=row.partition,
            )
        pick = min(free, key=lambda b: (loads[b].partitions, loads[b].size_bytes, b))
        loads[pick] = type(loads[pick])(pick, loads[pick].partitions + 1,
                                        loads[pick].size_bytes, loads[pick].leaders)  # fmt: skip
        targets[row.partition] = [pick if b == broker_id else b for b in row.replicas]
    return targets


def _rows_naming(cluster: Cluster, broker_ids: set[int]) -> list[PartitionAssignment]:
    """The cluster's assignments that name any of ``broker_ids`` as a replica, target
    replica or replica still to be removed."""
    rows = PartitionAssignment.objects.filter(topic__cluster=cluster).order_by("pk")
    return [
        r
        for r in rows
        if broker_ids & {*r.replicas, *(r.target_replicas or []), *r.removing_replicas}
    ]


# -- driving: the controller ------------------------------------------------------------
@transaction.atomic
def progress(cluster: Cluster, *, live: Collection[int], actor: Actor) -> int:
    """Finish the reassignments of ``cluster`` whose target replicas are all in the ISR
    (the topic ready, so every replica has been created) and a target replica can lead;
    returns how many partitions changed."""
    pairs = list(Broker.objects.filter(cluster=cluster).values_list("pk", "broker_id"))
    broker_ids, pk_of = dict(pairs), {b: pk for pk, b in pairs}
    rows = (
        PartitionAssignment.objects.select_for_update(of=("self",))
        .filter(topic__cluster=cluster, target_replicas__isnull=False)
        .select_related("topic__tenant")
    )
    done = 0
    for row in rows:
        topic = row.topic
        if topic.status != ProvisioningStatus.READY or (
            topic.observed_generation != topic.generation
        ):
            continue  # the new replicas may not exist yet
        state = state_of(row, broker_ids)
        target = list(row.target_replicas or [])
        result = finish_reassignment(state, target, live)
        if result is None:
            continue
        row.target_replicas = None
        row.removing_replicas = sorted({*row.removing_replicas, *state.replicas} - set(target))
        save_state(row, result, pk_of, actor)
        PartitionAssignment.objects.filter(pk=row.pk).update(
            target_replicas=None, removing_replicas=row.removing_replicas
        )
        audit.record(actor, "partition.reassigned", row, after=audit.snapshot(row),
                     tenant=topic.tenant)  # fmt: skip
        done += 1
    return done


def delete_removed(cluster: Cluster, *, live: Collection[int]) -> int:
    """Delete partitions from the brokers in their ``removing_replicas`` (call after the
    push that no longer lists those brokers); returns how many were deleted. A broker
    that does not answer is tried again later, unless it is being decommissioned and
    not live (nothing is waited for from a broker that is gone)."""
    by_id = {b.broker_id: b for b in cluster.brokers.all()}
    rows = [
        r
        for r in PartitionAssignment.objects.filter(topic__cluster=cluster).select_related("topic")
        if r.removing_replicas
    ]
    deleted = 0
    for row in rows:
        remaining = []
        for broker_id in row.removing_replicas:
            broker = by_id.get(broker_id)
            if broker is None or broker_id in row.replicas:
                continue
            if broker_id not in live:
                if broker.phase not in (BrokerPhase.DECOMMISSIONING, BrokerPhase.DECOMMISSIONED):
                    remaining.append(broker_id)
                continue
            try:
                broker_rpc.delete_partitions(broker.address, [(row.topic.full_name, row.partition)])
                deleted += 1
            except (BrokerUnavailable, BrokerRefusedError) as exc:
                log.warning("deleting %s-%s from %s failed: %s", row.topic.full_name,
                            row.partition, broker, exc.message)  # fmt: skip
                remaining.append(broker_id)
        PartitionAssignment.objects.filter(pk=row.pk).update(
            removing_replicas=remaining, updated_at=timezone.now()
        )
    return deleted


def finish_decommissions(cluster: Cluster, *, actor: Actor) -> list[Broker]:
    """Mark ``decommissioned`` the cluster's decommissioning brokers that no partition
    names any more; returns them (their processes are to be stopped)."""
    leaving = list(cluster.brokers.filter(phase=BrokerPhase.DECOMMISSIONING))
    if not leaving:
        return []
    named = {
        b
        for r in _rows_naming(cluster, {x.broker_id for x in leaving})
        for b in (*r.replicas, *(r.target_replicas or []), *r.removing_replicas)
    }
    done = [b for b in leaving if b.broker_id not in named]
    for broker in done:
        regions.set_broker_phase(broker, BrokerPhase.DECOMMISSIONED, actor=actor,
                                 reason="it holds no replica")  # fmt: skip
    return done
