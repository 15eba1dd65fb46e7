"""Partition leadership and ISRs in the database: the controller's decisions applied. With
``placement`` (new partitions) and ``reassignment`` (moves), the only writer of
``PartitionAssignment``'s replicas, leader and ISR.

``elect_leaders`` applies ``election.elect`` to every partition of a cluster and
``commit_isr_proposals`` the leaders' ISR change requests, each in one transaction with
the rows locked, auditing every change of leader (``partition.leader``; an unclean one
as ``partition.leader.unclean``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.regions.models import Broker, Cluster
from controlplane.topics.choices import TopicStatus
from controlplane.topics.election import Election, Replication, Why, commit_proposal, elect
from controlplane.topics.models import PartitionAssignment
from dataplane._gen.meridian.v1 import admin_pb2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Proposal:
    """An ISR change a broker (``proposer``, its broker id) asked for as leader."""

    proposer: int
    topic: str
    partition: int
    leader_epoch: int
    isr_version: int
    isr: tuple[int, ...]


def proposals_of(proposer: int, response: admin_pb2.UpdateMetadataResponse) -> list[Proposal]:
    return [
        Proposal(proposer, p.topic, p.partition, p.leader_epoch, p.isr_version, tuple(p.isr))
        for p in response.isr_proposals
    ]


def state_of(row: PartitionAssignment, broker_ids: dict[int, int]) -> Replication:
    """The row's replication state (``broker_ids``: ``Broker.pk`` -> ``broker_id``)."""
    leader = broker_ids.get(row.leader_id) if row.leader_id is not None else None
    return Replication(
        replicas=tuple(row.replicas),
        isr=tuple(row.isr),
        leader=leader,
        leader_epoch=row.leader_epoch,
        isr_version=row.isr_version,
    )


def _locked_rows(cluster: Cluster) -> QuerySet[PartitionAssignment]:
    return (
        PartitionAssignment.objects.select_for_update(of=("self",))
        .filter(topic__cluster=cluster)
        .exclude(topic__status=TopicStatus.DELETING)
        .select_related("topic__tenant")
        .order_by("topic_id", "partition")
    )


def _pks(cluster: Cluster) -> tuple[dict[int, int], dict[int, int]]:
    """(pk -> broker_id, broker_id -> pk) of the cluster's brokers."""
    pairs = list(Broker.objects.filter(cluster=cluster).values_list("pk", "broker_id"))
    return dict(pairs), {b: pk for pk, b in pairs}


@transaction.atomic
def elect_leaders(
    cluster: Cluster, *, live: Collection[int], settled: Collection[int] = (), actor: Actor
) -> int:
    """Apply ``election.elect`` to every partition of ``cluster`` (topics not being
    deleted) with ``live`` broker ids and ``settled`` ones (live long enough to take
    back preferred leadership); returns how many partitions changed."""
    broker_ids, pk_of = _pks(cluster)
    changed = 0
    for row in _locked_rows(cluster):
        state = state_of(row, broker_ids)
        result = elect(
            state, live, unclean_allowed=row.topic.unclean_leader_election, settled=settled
        )
        if result.state != state:
            save_state(row, result, pk_of, actor)
            changed += 1
    return changed


def save_state(
    row: PartitionAssignment, result: Election, pk_of: dict[int, int], actor: Actor
) -> None:
    """Write ``result.state`` onto ``row``; audit a change of leader."""
    before = audit.snapshot(row)
    state = result.state
    row.replicas, row.isr = list(state.replicas), list(state.isr)
    row.leader_id = pk_of.get(state.leader) if state.leader is not None else None
    row.leader_epoch, row.isr_version = state.leader_epoch, state.isr_version
    if state.replicas:
        row.broker_id = pk_of.get(state.replicas[0], row.broker_id)
    row.updated_at = timezone.now()
    row.save(
        update_fields=[
            "replicas",
            "isr",
            "leader",
            "leader_epoch",
            "isr_version",
            "broker",
            "updated_at",
        ]
    )
    if result.why is None or result.why == Why.FIRST:
        return
    action = "partition.leader.unclean" if result.why == Why.UNCLEAN else "partition.leader"
    audit.record(
        actor, action, row, before=before, after=audit.snapshot(row), tenant=row.topic.tenant
    )
    log.info("%s-%s: leader %s, epoch %s (%s), isr %s", row.topic.full_name, row.partition,
             state.leader, state.leader_epoch, result.why, state.isr)  # fmt: skip


@transaction.atomic
def commit_isr_proposals(
    cluster: Cluster, proposals: Iterable[Proposal], *, live: Collection[int], actor: Actor
) -> int:
    """Commit the valid ones of ``proposals`` (see ``election.commit_proposal``);
    returns how many were committed. Invalid or stale ones are ignored (logged)."""
    wanted = {(p.topic, p.partition): p for p in proposals}
    if not wanted:
        return 0
    broker_ids, pk_of = _pks(cluster)
    committed = 0
    for row in _locked_rows(cluster).filter(topic__full_name__in={t for t, _ in wanted}):
        proposal = wanted.get((row.topic.full_name, row.partition))
        if proposal is None:
            continue
        state = state_of(row, broker_ids)
        new = commit_proposal(
            state,
            proposer=proposal.proposer,
            leader_epoch=proposal.leader_epoch,
            isr_version=proposal.isr_version,
            isr=proposal.isr,
            live=live,
        )
        if new is None:
            log.debug("ignored ISR proposal %s (state %s)", proposal, state)
            continue
        save_state(row, Election(new), pk_of, actor)
        committed += 1
    return committed
