"""The reconciler: make brokers hold what the desired state says (DESIGN decision 5).

``reconcile_topic(topic_id)`` makes one topic true on its brokers; ``reconcile_cluster``
(in ``controlplane.topics.drift``, re-exported here) compares a whole cluster with what
its brokers report and heals drift. Both are idempotent and safe to run concurrently
with each other and with desired-state changes:

- A run works on the ``generation`` it read. Every status write is conditional on that
  generation (``filter(pk=..., generation=g).update(...)``), so a run that raced a newer
  change never marks the newer generation ready, and never overwrites ``deleting``.
- ``BrokerUnavailable`` propagates (the Celery task retries it); a permanent refusal
  (``BrokerRefusedError``) fails the topic with the broker's reason.

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
from controlplane.regions.models import Broker
from controlplane.topics import brokers
from controlplane.topics.brokers import BrokerRefusedError, BrokerUnavailable
from controlplane.topics.drift import ClusterReport, desired_config, reconcile_cluster
from controlplane.topics.models import PartitionAssignment, Topic
from controlplane.topics.placement import UNPLACEABLE_PHASES, assign_partitions

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


def reconcile_topic(topic_id: int) -> Outcome:
    """Make topic ``topic_id`` true on its brokers: partitions created or altered to the
    topic's config, then ready; or, for a topic being deleted, its partitions removed
    from every broker of the cluster and its row deleted. Raises ``BrokerUnavailable``
    when a broker it needs did not answer (nothing is marked failed then)."""
    topic = Topic.objects.select_related("tenant").filter(pk=topic_id).first()
    if topic is None:
        return Outcome.GONE
    if topic.status == ProvisioningStatus.DELETING:
        return _delete(topic)
    if topic.status == ProvisioningStatus.READY and topic.observed_generation == topic.generation:
        return Outcome.UNCHANGED
    return _apply(topic)


def _apply(topic: Topic) -> Outcome:
    generation = topic.generation
    if not _set_status(topic, generation, ProvisioningStatus.PROVISIONING):
        return Outcome.SUPERSEDED
    assign_partitions(topic)  # partitions added since the last placement
    config = desired_config(topic)
    try:
        for broker, rows in _assignments_by_broker(topic):
            specs = [brokers.spec(topic.full_name, row.partition, config) for row in rows]
            brokers.ensure_partitions(broker.address, specs)
            _set_assignment_status(rows, ProvisioningStatus.READY)
    except BrokerRefusedError as exc:
        return _fail(topic, generation, exc.message)
    return _finish(topic, generation)


def _assignments_by_broker(
    topic: Topic,
) -> list[tuple[Broker, list[PartitionAssignment]]]:
    groups: dict[int, list[PartitionAssignment]] = defaultdict(list)
    by_pk: dict[int, Broker] = {}
    for row in topic.assignments.select_related("broker").order_by("partition"):
        groups[row.broker_id].append(row)
        by_pk[row.broker_id] = row.broker
    return [(by_pk[pk], groups[pk]) for pk in sorted(groups)]


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
        _set_assignment_status(topic.assignments.all(), ProvisioningStatus.FAILED)
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
    strays are reported as drift later), one that holds an assignment must answer."""
    generation = topic.generation
    assigned = set(topic.assignments.values_list("broker_id", flat=True))
    numbers = set(range(topic.partitions)) | set(
        topic.assignments.values_list("partition", flat=True)
    )
    partitions = [(topic.full_name, p) for p in sorted(numbers)]
    try:
        for broker in Broker.objects.filter(cluster_id=topic.cluster_id).exclude(
            phase__in=UNPLACEABLE_PHASES
        ):
            _delete_on(broker, partitions, required=broker.pk in assigned)
    except BrokerRefusedError as exc:
        return _fail_delete(topic, generation, exc.message)
    return _delete_row(topic, generation)


def _delete_on(broker: Broker, partitions: list[tuple[str, int]], *, required: bool) -> None:
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
        audit.record(
            RECONCILER, "topic.deleted", locked, before=audit.snapshot(locked), tenant=locked.tenant
        )
        locked.delete()  # its assignments cascade
    return Outcome.DELETED
