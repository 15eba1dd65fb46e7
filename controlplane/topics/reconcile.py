"""The reconciler: make brokers hold what the desired state says (DESIGN decision 5).

``reconcile_topic(topic_id)`` makes one topic true on its brokers; ``reconcile_cluster``
(in ``controlplane.topics.drift``, re-exported here) compares a whole cluster with what
its brokers report and heals drift. Both are idempotent and safe to run concurrently
with each other and with desired-state changes:

- A run works on the ``generation`` it read. Every status write is conditional on that
  generation (``filter(pk=..., generation=g).update(...)``), so a run that raced a newer
  change never marks the newer generation ready, and never overwrites ``deleting``.
- One run per topic at a time: ``reconcile_topic`` holds the topic's lock
  (``controlplane.topics.locks``) for its whole run, and the drift pass holds it while
  it heals the topic's partitions. A run that cannot get it within a few seconds raises
  ``TopicBusy``, which the Celery task retries.
- Every run that has work to do touches ``updated_at`` at its start (and again when a
  broker did not answer), so the drift pass does not enqueue another run of a topic
  whose run is in progress or retrying.
- ``BrokerUnavailable`` propagates (the Celery task retries it); a permanent refusal
  (``BrokerRefusedError``) fails the topic. ``status_reason`` is shown to the tenant:
  it names the broker by its id and the error by its code; the broker's address and raw
  message go to the log.
- A partition the control plane never asked a broker for (its assignment pending or
  failed) that already exists there holding records is a stranger's: see
  ``_strangers``.
- Every create and alter carries the topic's ``topic_id`` (its primary key), which
  names its objects in the object store (tiered storage). A broker takes it where the
  partition has none (partitions made before ids were sent) and refuses another one
  (``INVALID_CONFIG``): a partition holding another topic's id is not this topic's, so
  the run fails like any refusal (the drift pass reports it as ``identity``).
- Deleting a tiered topic deletes its objects from the cluster's object store once no
  broker holds its partitions (``tiering.delete_remote_objects``; a store that does not
  answer leaves them to the periodic cleaner).

The reconciler's own changes (ready, failed, the deleted row) are audited as the actor
``system:reconciler``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from enum import StrEnum

from django.db import transaction
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.gateway import admin as brokers
from controlplane.gateway.errors import BrokerRefusedError, BrokerUnavailable
from controlplane.regions.models import Broker
from controlplane.topics import tiering
from controlplane.topics.choices import DriftKind
from controlplane.topics.drift import (
    ClusterReport,
    Finding,
    desired_config,
    open_unknown_partitions,
    reconcile_cluster,
    report_finding,
)
from controlplane.topics.locks import DEFAULT_WAIT_S, TopicBusy, topic_lock
from controlplane.topics.models import PartitionAssignment, Topic
from controlplane.topics.placement import UNPLACEABLE_PHASES, assign_partitions
from dataplane._gen.meridian.v1 import admin_pb2

log = logging.getLogger(__name__)

RECONCILER = Actor.system("reconciler")

__all__ = ["RECONCILER", "ClusterReport", "Outcome", "reconcile_cluster", "reconcile_topic"]


class Outcome(StrEnum):
    """What one ``reconcile_topic`` run did."""

    READY = "ready"  # every partition is on its broker with the desired config
    FAILED = "failed"  # a broker refused permanently; the topic says why
    DELETED = "deleted"  # partitions removed from the brokers, the row deleted
    UNCHANGED = "unchanged"  # already ready at its generation: nothing to do
    SUPERSEDED = "superseded"  # a newer desired change arrived; its own run will finish
    GONE = "gone"  # no such topic (deleted meanwhile)


def reconcile_topic(topic_id: int, *, lock_wait_s: float = DEFAULT_WAIT_S) -> Outcome:
    """Make topic ``topic_id`` true on its brokers: partitions created or altered to the
    topic's config on every replica, then ready; or, for a topic being deleted, its
    partitions removed from every broker of the cluster and its row deleted. Raises
    ``BrokerUnavailable`` when a broker it needs did not answer (nothing is marked
    failed then), and ``TopicBusy`` when another run of the topic did not finish
    within ``lock_wait_s``."""
    with topic_lock(topic_id, wait_s=lock_wait_s):
        topic = Topic.objects.select_related("tenant").filter(pk=topic_id).first()
        if topic is None:
            return Outcome.GONE
        if (
            topic.status == ProvisioningStatus.READY
            and topic.observed_generation == topic.generation
        ):
            return Outcome.UNCHANGED
        _touch(topic)
        try:
            if topic.status == ProvisioningStatus.DELETING:
                return _delete(topic)
            return _apply(topic)
        except BrokerUnavailable:
            _touch(topic)  # retrying: the drift pass need not enqueue another run
            raise


def _touch(topic: Topic) -> None:
    """Mark the topic as being worked on (``updated_at``), whatever its status."""
    Topic.objects.filter(pk=topic.pk).update(updated_at=timezone.now())


def _apply(topic: Topic) -> Outcome:
    generation = topic.generation
    if not _set_status(topic, generation, ProvisioningStatus.PROVISIONING):
        return Outcome.SUPERSEDED
    assign_partitions(topic)  # partitions added since the last placement
    config = desired_config(topic)
    groups = _assignments_by_broker(topic)
    for broker, rows in groups:
        strangers = _strangers(topic, broker, rows)
        if strangers:
            return _refuse_strangers(topic, generation, broker, strangers)
        specs = [brokers.spec(topic.full_name, row.partition, config) for row in rows]
        # Asked for: a create that times out (but happened) is not taken for a stranger's.
        _set_assignment_status(
            [r for r in rows if r.status != ProvisioningStatus.READY],
            ProvisioningStatus.PROVISIONING,
        )
        try:
            brokers.ensure_partitions(broker.address, specs)
        except BrokerRefusedError as exc:
            log.warning("topic %s: %s refused: %s", topic.full_name, broker, exc.message)
            return _fail(topic, generation, _refusal(broker, exc))
    # Ready once every replica has it (a row is in several groups).
    _set_assignment_status([r for _, rows in groups for r in rows], ProvisioningStatus.READY)
    return _finish(topic, generation)


def _refusal(broker: Broker, exc: BrokerRefusedError) -> str:
    """A refusal as the tenant may read it: the broker's id and the error code, not the
    broker's address or its message (both logged)."""
    partition = exc.details.get("partition")
    what = "the request" if partition is None else f"partition {partition}"
    reason = f"broker {broker.broker_id} refused {what}"
    error = exc.details.get("error")
    return f"{reason}: {error}" if error else reason


# Assignments the control plane never asked their broker to create (or whose run failed
# before it knew): a partition found there may not be the topic's own.
UNCONFIRMED = (ProvisioningStatus.PENDING, ProvisioningStatus.FAILED)


def _strangers(
    topic: Topic, broker: Broker, rows: list[PartitionAssignment]
) -> list[admin_pb2.PartitionState]:
    """The partitions of ``rows`` that ``broker`` already hosts although the control
    plane never asked it for them, and that hold records: a stranger's partition (an
    orphan of a deleted topic of the same name, left by a race or made behind the
    control plane's back). Asks the broker only when some assignment is unconfirmed (a
    topic's first creation, new partitions).

    Why not take it over: the new topic's consumers would read the stranger's records,
    possibly another (former) tenant's, and its offsets would go on from them. Why not
    delete it: deleting data is an operator's decision. So the topic fails, saying
    which partition is in the way, the stranger is reported as an ``unknown`` drift
    finding and left as it is. An *empty* partition is taken over: it cannot be told
    from one an earlier attempt of this run made, and it exposes nothing."""
    unconfirmed = {r.partition for r in rows if r.status in UNCONFIRMED}
    if not unconfirmed:
        return []
    state = brokers.describe_state(broker.address, [topic.full_name])
    return [
        p
        for p in state.partitions
        if p.topic == topic.full_name
        and p.partition in unconfirmed
        and (p.log_end_offset > 0 or p.size_bytes > 0)
    ]


def _refuse_strangers(
    topic: Topic,
    generation: int,
    broker: Broker,
    strangers: list[admin_pb2.PartitionState],
) -> Outcome:
    for state in strangers:
        log.warning(
            "topic %s: partition %d already exists on %s with records "
            "(log_end_offset=%d size_bytes=%d); not adopted",
            topic.full_name,
            state.partition,
            broker,
            state.log_end_offset,
            state.size_bytes,
        )
        report_finding(
            broker,
            Finding(
                DriftKind.UNKNOWN,
                topic.full_name,
                state.partition,
                f"existed before the topic was created here, not adopted: "
                f"size_bytes={state.size_bytes} log_end_offset={state.log_end_offset}",
            ),
        )
    numbers = ", ".join(str(s.partition) for s in strangers)
    return _fail(
        topic,
        generation,
        f"partition {numbers} already exists on broker {broker.broker_id} with records "
        "this topic did not write; an operator must remove it",
    )


def _assignments_by_broker(
    topic: Topic,
) -> list[tuple[Broker, list[PartitionAssignment]]]:
    """Per broker holding replicas of the topic (by broker id): the rows it holds."""
    groups: dict[int, list[PartitionAssignment]] = defaultdict(list)
    for row in topic.assignments.order_by("partition"):
        for broker_id in row.replicas:
            groups[broker_id].append(row)
    by_id = {b.broker_id: b for b in Broker.objects.filter(cluster_id=topic.cluster_id)}
    return [(by_id[b], groups[b]) for b in sorted(groups) if b in by_id]


def _set_assignment_status(rows: Iterable[PartitionAssignment], status: str) -> None:
    PartitionAssignment.objects.filter(pk__in=[r.pk for r in rows]).update(
        status=status, updated_at=timezone.now()
    )


def _set_status(topic: Topic, generation: int, status: str, reason: str = "") -> bool:
    """Set the status if the topic is still at ``generation`` and not being deleted."""
    updated = (
        Topic.objects.filter(pk=topic.pk, generation=generation)
        .exclude(status=ProvisioningStatus.DELETING)
        .update(status=status, status_reason=reason, updated_at=timezone.now())
    )
    return bool(updated)


def _finish(topic: Topic, generation: int) -> Outcome:
    """Mark ``generation`` observed and the topic ready, unless a newer change came."""
    with transaction.atomic():
        updated = Topic.objects.filter(
            pk=topic.pk, generation=generation, status=ProvisioningStatus.PROVISIONING
        ).update(
            status=ProvisioningStatus.READY,
            status_reason="",
            observed_generation=generation,
            updated_at=timezone.now(),
        )
        if not updated:
            return Outcome.SUPERSEDED
        _audit(topic, "topic.ready")
    return Outcome.READY


def _fail(topic: Topic, generation: int, reason: str) -> Outcome:
    log.warning("topic %s failed: %s", topic.full_name, reason)
    with transaction.atomic():
        if not _set_status(topic, generation, ProvisioningStatus.FAILED, reason):
            return Outcome.SUPERSEDED
        # Partitions made stay ready: they are on their brokers.
        _set_assignment_status(
            topic.assignments.exclude(status=ProvisioningStatus.READY), ProvisioningStatus.FAILED
        )
        _audit(topic, "topic.failed")
    return Outcome.FAILED


def _audit(topic: Topic, action: str) -> None:
    before = audit.snapshot(topic)
    topic.refresh_from_db()
    audit.record(
        RECONCILER, action, topic, before=before, after=audit.snapshot(topic), tenant=topic.tenant
    )


def _delete(topic: Topic) -> Outcome:
    """Delete the topic's partitions on every broker of its cluster, then its row.

    Every broker is asked (not only the assigned ones) so a partition left by an older
    placement goes too; a broker that holds no assignment of the topic may be down (its
    strays are reported as drift later), one that holds an assignment must answer. A
    stranger's partition the topic refused to adopt (see ``_strangers``) is left alone."""
    generation = topic.generation
    replica_lists = topic.assignments.values_list("replicas", flat=True)
    held = {b for replicas in replica_lists for b in replicas}
    assigned = set(
        Broker.objects.filter(cluster_id=topic.cluster_id, broker_id__in=held).values_list(
            "pk", flat=True
        )
    )
    numbers = set(range(topic.partitions)) | set(
        topic.assignments.values_list("partition", flat=True)
    )
    refused = _refused_strangers(topic)
    for broker in Broker.objects.filter(cluster_id=topic.cluster_id).exclude(
        phase__in=UNPLACEABLE_PHASES
    ):
        skip = refused.get(broker.pk, set())
        partitions = [(topic.full_name, p) for p in sorted(numbers - skip)]
        try:
            _delete_on(broker, partitions, required=broker.pk in assigned)
        except BrokerRefusedError as exc:
            log.warning("topic %s: %s refused delete: %s", topic.full_name, broker, exc.message)
            return _fail_delete(topic, generation, _refusal(broker, exc))
    tiering.delete_remote_objects(topic)  # no broker holds a partition to upload from now
    return _delete_row(topic, generation)


def _refused_strangers(topic: Topic) -> dict[int, set[int]]:
    """Per broker pk: the topic's partitions there that are a stranger's (an unconfirmed
    assignment with an open ``unknown`` finding)."""
    refused: dict[int, set[int]] = defaultdict(set)
    rows = topic.assignments.filter(status__in=UNCONFIRMED).select_related("broker")
    for row in rows:
        if row.partition in open_unknown_partitions(row.broker, topic.full_name):
            refused[row.broker_id].add(row.partition)
    return refused


def _delete_on(broker: Broker, partitions: list[tuple[str, int]], *, required: bool) -> None:
    if not partitions:
        return
    try:
        brokers.delete_partitions(broker.address, partitions)
    except BrokerUnavailable:
        if required:
            raise
        log.info("broker %s (no assignment) unavailable during delete", broker)


def _fail_delete(topic: Topic, generation: int, reason: str) -> Outcome:
    """A delete the broker refuses fails the topic (the owner may delete it again)."""
    with transaction.atomic():
        updated = Topic.objects.filter(
            pk=topic.pk, generation=generation, status=ProvisioningStatus.DELETING
        ).update(
            status=ProvisioningStatus.FAILED,
            status_reason=f"delete failed: {reason}",
            updated_at=timezone.now(),
        )
        if not updated:
            return Outcome.SUPERSEDED
        _audit(topic, "topic.failed")
    return Outcome.FAILED


def _delete_row(topic: Topic, generation: int) -> Outcome:
    with transaction.atomic():
        locked = (
            Topic.objects.select_for_update()
            .select_related("tenant")
            .filter(pk=topic.pk, generation=generation, status=ProvisioningStatus.DELETING)
            .first()
        )
        if locked is None:
            return Outcome.SUPERSEDED
        if locked.lane_topics.exists() or locked.mirror_copies.exists():
            # Its lane topics (and a lane topic's mirror copies) are being deleted with
            # it (``delete_topic``): their rows go first, so none outlives its trunk or
            # origin; retried until then.
            raise TopicBusy(locked.pk)
        audit.record(
            RECONCILER, "topic.deleted", locked, before=audit.snapshot(locked), tenant=locked.tenant
        )
        locked.delete()  # its assignments cascade
    return Outcome.DELETED
