"""The controller's replication decisions written to the database (real Postgres, no
broker processes): elections audited, ISR proposals committed or ignored, the push
carrying replicas and ISR, reassignment and decommission moving through their steps."""

from __future__ import annotations

import pytest

from controlplane.controller.leaders import NO_LEADER, metadata_request
from controlplane.core.errors import Conflict, InvalidRequest
from controlplane.core.models import AuditEvent
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics import reassignment
from controlplane.topics.models import PartitionAssignment, Topic
from controlplane.topics.partitions import Proposal, commit_isr_proposals, elect_leaders
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import make_cluster
from tests.controlplane.controller.conftest import ADMIN
from tests.support.controlplane import make_tenant


@pytest.fixture
def cluster(db: None) -> Cluster:
    return make_cluster("local", brokers=4)


@pytest.fixture
def tenant(cluster: Cluster) -> Tenant:
    return make_tenant("acme", region=cluster.region)


def _topic(tenant: Tenant, name: str = "orders", partitions: int = 1, **extra: object) -> Topic:
    topic: Topic = create_topic(
        tenant, name=name, partitions=partitions, replication_factor=3, actor=ADMIN, **extra
    )
    return topic


def _row(topic: Topic, partition: int = 0) -> PartitionAssignment:
    return PartitionAssignment.objects.select_related("leader").get(
        topic=topic, partition=partition
    )


def _leader(row: PartitionAssignment) -> int | None:
    return row.leader.broker_id if row.leader is not None else None


def test_failover_is_written_and_audited(cluster: Cluster, tenant: Tenant) -> None:
    topic = _topic(tenant)
    first = _row(topic).replicas
    assert elect_leaders(cluster, live={1, 2, 3, 4}, actor=ADMIN) == 1
    row = _row(topic)
    assert (_leader(row), row.leader_epoch) == (first[0], 0)
    assert not AuditEvent.objects.filter(action="partition.leader").exists()  # a first one

    survivors = set(first[1:])
    assert elect_leaders(cluster, live=survivors, actor=ADMIN) == 1
    row = _row(topic)
    assert (_leader(row), row.leader_epoch) == (first[1], 1)
    assert (row.isr, row.isr_version) == (first[1:], 1)
    event = AuditEvent.objects.get(action="partition.leader")
    assert (event.before["leader_epoch"], event.after["leader_epoch"]) == (0, 1)
    assert event.tenant_id == tenant.pk
    assert elect_leaders(cluster, live=survivors, actor=ADMIN) == 0


def test_unclean_election_only_for_topics_that_opted_in(cluster: Cluster, tenant: Tenant) -> None:
    clean = _topic(tenant, "clean")
    unclean = _topic(tenant, "unclean", unclean_leader_election=True)
    elect_leaders(cluster, live={1, 2, 3, 4}, actor=ADMIN)
    for topic in (clean, unclean):
        replicas = _row(topic).replicas
        PartitionAssignment.objects.filter(topic=topic).update(isr=replicas[:1])
    # Both partitions' only in-sync replica dies.
    dead = {_row(clean).replicas[0], _row(unclean).replicas[0]}
    elect_leaders(cluster, live={1, 2, 3, 4} - dead, actor=ADMIN)
    offline = _row(clean)
    assert (offline.leader, offline.leader_epoch) == (None, 1)
    elected = _row(unclean)
    assert _leader(elected) in set(elected.replicas) - dead
    assert elected.isr == [_leader(elected)]
    assert AuditEvent.objects.filter(action="partition.leader.unclean").count() == 1
    push = metadata_request(cluster, list(cluster.brokers.all()), controller_id="c", epoch=1)
    shown = {t.name: t for t in push.topics}
    assert shown[clean.full_name].partitions[0].leader_id == NO_LEADER
    assert shown[unclean.full_name].unclean_leader_election is True


def test_proposals_are_committed_only_from_the_current_leader_at_the_current_versions(
    cluster: Cluster, tenant: Tenant
) -> None:
    topic = _topic(tenant)
    elect_leaders(cluster, live={1, 2, 3, 4}, actor=ADMIN)
    row = _row(topic)
    leader, follower, other = row.replicas

    def proposal(proposer: int, epoch: int, version: int, isr: tuple[int, ...]) -> Proposal:
        return Proposal(proposer, topic.full_name, 0, epoch, version, isr)

    stale = [
        proposal(leader, 7, 0, (leader, follower)),  # a leader epoch never issued
        proposal(follower, 0, 0, (follower, leader)),  # not the leader
        proposal(leader, 0, 3, (leader, follower)),  # an ISR version not stored
    ]
    assert commit_isr_proposals(cluster, stale, live={1, 2, 3, 4}, actor=ADMIN) == 0
    assert _row(topic).isr_version == 0
    good = [proposal(leader, 0, 0, (leader, follower))]
    assert commit_isr_proposals(cluster, good, live={1, 2, 3, 4}, actor=ADMIN) == 1
    row = _row(topic)
    assert (row.isr, row.isr_version) == ([leader, follower], 1)
    # The same proposal again is stale now (based on version 0).
    assert commit_isr_proposals(cluster, good, live={1, 2, 3, 4}, actor=ADMIN) == 0
    push = metadata_request(cluster, list(cluster.brokers.all()), controller_id="c", epoch=1)
    (shown,) = push.topics
    assert shown.min_insync_replicas == 2
    assert list(shown.partitions[0].replicas) == [leader, follower, other]
    assert (list(shown.partitions[0].isr), shown.partitions[0].isr_version) == (
        [leader, follower],
        1,
    )
    assert shown.partitions[0].leader_id == leader


def test_a_reassignment_adds_new_replicas_first_then_drops_the_old_ones(
    cluster: Cluster, tenant: Tenant
) -> None:
    topic = _topic(tenant)
    elect_leaders(cluster, live={1, 2, 3, 4}, actor=ADMIN)
    old = _row(topic).replicas
    (spare,) = {1, 2, 3, 4} - set(old)
    target = [spare, *old[1:]]  # the leader's place goes to the spare broker
    reassignment.reassign_partitions(topic, {0: target}, actor=ADMIN)
    row = _row(topic)
    assert row.target_replicas == target
    assert row.replicas == [*target, old[0]]  # old and new while the new one catches up
    topic.refresh_from_db()
    assert (topic.generation, topic.status) == (2, "pending")
    with pytest.raises(Conflict):
        reassignment.reassign_partitions(topic, {0: old}, actor=ADMIN)

    Topic.objects.filter(pk=topic.pk).update(status="ready", observed_generation=2)
    assert reassignment.progress(cluster, live={1, 2, 3, 4}, actor=ADMIN) == 0  # not in sync
    PartitionAssignment.objects.filter(pk=row.pk).update(isr=[*old, spare])
    assert reassignment.progress(cluster, live={1, 2, 3, 4}, actor=ADMIN) == 1
    row = _row(topic)
    assert (row.replicas, row.target_replicas, row.removing_replicas) == (target, None, [old[0]])
    assert (_leader(row), row.leader_epoch) == (spare, 1)
    assert sorted(row.isr) == sorted(target)
    assert row.broker.broker_id == spare
    assert AuditEvent.objects.filter(action="partition.reassigned").count() == 1


@pytest.mark.parametrize(
    "target", [[1, 2], [1, 1, 2], [1, 2, 9]], ids=["too-few", "duplicate", "unknown-broker"]
)
def test_a_bad_target_is_refused(cluster: Cluster, tenant: Tenant, target: list[int]) -> None:
    topic = _topic(tenant)
    with pytest.raises(InvalidRequest):
        reassignment.reassign_partitions(topic, {0: target}, actor=ADMIN)
    with pytest.raises(InvalidRequest):
        reassignment.reassign_partitions(topic, {5: [1, 2, 3]}, actor=ADMIN)
    assert _row(topic).target_replicas is None


def test_decommission_moves_every_replica_off_the_broker(cluster: Cluster, tenant: Tenant) -> None:
    topic = _topic(tenant, partitions=4)
    elect_leaders(cluster, live={1, 2, 3, 4}, actor=ADMIN)
    leaving = Broker.objects.get(cluster=cluster, broker_id=2)
    reassignment.decommission_broker(leaving, actor=ADMIN)
    leaving.refresh_from_db()
    assert leaving.phase == BrokerPhase.DECOMMISSIONING
    rows = list(topic.assignments.order_by("partition"))
    for row in rows:
        if row.target_replicas is not None:
            assert 2 not in row.target_replicas
            assert len(set(row.target_replicas)) == 3
    assert any(r.target_replicas for r in rows)
    assert reassignment.finish_decommissions(cluster, actor=ADMIN) == []

    # Every new replica catches up: the reassignments finish, the broker is left empty.
    topic.refresh_from_db()
    Topic.objects.filter(pk=topic.pk).update(status="ready", observed_generation=topic.generation)
    for row in rows:
        PartitionAssignment.objects.filter(pk=row.pk).update(isr=row.replicas)
    reassignment.progress(cluster, live={1, 2, 3, 4}, actor=ADMIN)
    assert all(2 not in r.replicas for r in topic.assignments.all())
    assert reassignment.delete_removed(cluster, live={1, 3, 4}) == 0  # 2 is not live
    assert reassignment.finish_decommissions(cluster, actor=ADMIN) == [leaving]
    leaving.refresh_from_db()
    assert leaving.phase == BrokerPhase.DECOMMISSIONED


def test_decommission_is_refused_when_no_other_broker_can_take_the_replicas(
    db: None,
) -> None:
    cluster = make_cluster("three", brokers=3)
    tenant = make_tenant("solo", region=cluster.region)
    _topic(tenant)
    with pytest.raises(Conflict):
        reassignment.decommission_broker(cluster.brokers.get(broker_id=1), actor=ADMIN)
    assert cluster.brokers.get(broker_id=1).phase == BrokerPhase.READY
