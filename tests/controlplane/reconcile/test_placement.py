"""Placement: load spread (counts, then bytes, then broker id), consecutive partitions
of a topic on different brokers, determinism; and the rows ``assign_partitions`` writes."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.core.choices import ProvisioningStatus
from controlplane.regions.choices import BrokerPhase, ProvisionerKind
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.tenants.models import Tenant
from controlplane.topics.models import PartitionAssignment, Topic
from controlplane.topics.placement import (
    BrokerLoad,
    NoBrokerAvailable,
    assign_partitions,
    plan_placement,
    plan_replicas,
)
from tests.support.controlplane import make_tenant

broker_ids = st.lists(st.integers(1, 50), min_size=1, max_size=8, unique=True)
loads = st.lists(
    st.builds(BrokerLoad, st.integers(1, 50), st.integers(0, 20), st.integers(0, 10**9)),
    min_size=1,
    max_size=8,
    unique_by=lambda load: load.broker_id,
)


@given(broker_ids, st.integers(0, 200))
def test_empty_cluster_counts_differ_by_at_most_one(ids: list[int], count: int) -> None:
    plan = plan_placement([BrokerLoad(b, 0, 0) for b in ids], count)
    per_broker = Counter(plan)
    counts = [per_broker.get(b, 0) for b in ids]
    assert len(plan) == count
    assert max(counts) - min(counts) <= 1


@given(loads, st.integers(0, 100))
def test_consecutive_partitions_land_on_different_brokers(
    current: list[BrokerLoad], count: int
) -> None:
    plan = plan_placement(current, count)
    if len(current) > 1:
        assert all(a != b for a, b in pairwise(plan))


@given(loads, st.integers(0, 100))
def test_deterministic_and_independent_of_input_order(
    current: list[BrokerLoad], count: int
) -> None:
    assert plan_placement(current, count) == plan_placement(list(reversed(current)), count)


@given(loads)
def test_first_partition_goes_to_the_least_loaded_broker(current: list[BrokerLoad]) -> None:
    """Fewest partitions, then fewest bytes, then the lowest id."""
    least = min(current, key=lambda load: (load.partitions, load.size_bytes, load.broker_id))
    assert plan_placement(current, 1) == [least.broker_id]


@given(loads, st.integers(0, 100))
def test_placing_never_widens_the_gap(current: list[BrokerLoad], count: int) -> None:
    """The spread of partition counts after placing is no wider than before (or 1)."""
    per_broker = Counter(plan_placement(current, count))
    before = [load.partitions for load in current]
    after = [load.partitions + per_broker[load.broker_id] for load in current]
    assert max(after) - min(after) <= max(max(before) - min(before), 1)


def test_bytes_break_ties_between_equal_counts() -> None:
    current = [BrokerLoad(1, 4, 9_000), BrokerLoad(2, 4, 10), BrokerLoad(3, 4, 5_000)]
    assert plan_placement(current, 3) == [2, 3, 1]


def test_counts_come_before_bytes_and_ids_break_the_last_ties() -> None:
    current = [BrokerLoad(3, 1, 0), BrokerLoad(1, 2, 0), BrokerLoad(2, 1, 0)]
    assert plan_placement(current, 4) == [2, 3, 1, 2]


def test_no_broker_is_an_error() -> None:
    with pytest.raises(NoBrokerAvailable):
        plan_placement([], 1)
    assert plan_placement([], 0) == []


@pytest.fixture
def fake_cluster(db: None) -> Cluster:
    """Rows only (no processes): three ready brokers and a stopped one."""
    region = Region.objects.create(name="test")
    cluster: Cluster = Cluster.objects.create(
        region=region, name="c1", provisioner=ProvisionerKind.STATIC, status="ready"
    )
    for broker_id in (1, 2, 3):
        Broker.objects.create(cluster=cluster, broker_id=broker_id, port=9000 + broker_id)
    Broker.objects.create(cluster=cluster, broker_id=4, port=9004, phase=BrokerPhase.STOPPED)
    return cluster


def _topic(cluster: Cluster, name: str, partitions: int) -> Topic:
    tenant = Tenant.objects.first() or make_tenant("acme")
    topic: Topic = Topic.objects.create(
        tenant=tenant,
        cluster=cluster,
        name=name,
        full_name=f"{tenant.slug}.{name}",
        partitions=partitions,
        retention_ms=60_000,
        retention_bytes=2**20,
        status=ProvisioningStatus.PENDING,
    )
    return topic


def _placement(topic: Topic) -> list[int]:
    return list(topic.assignments.order_by("partition").values_list("broker__broker_id", flat=True))


def test_assign_partitions_spreads_over_placeable_brokers(fake_cluster: Cluster) -> None:
    topic = _topic(fake_cluster, "orders", 6)
    rows = assign_partitions(topic)
    assert [r.partition for r in rows] == list(range(6))
    assert _placement(topic) == [1, 2, 3, 1, 2, 3]  # never broker 4: it is stopped


def test_assign_partitions_only_adds_what_is_missing(fake_cluster: Cluster) -> None:
    topic = _topic(fake_cluster, "orders", 2)
    assign_partitions(topic)
    assert assign_partitions(topic) == []
    topic.partitions = 4
    topic.save()
    added = assign_partitions(topic)
    assert [r.partition for r in added] == [2, 3]
    # Broker 3 had nothing, then 1 and 2 tie on count; 3 got partition 2, so 3 is skipped.
    assert _placement(topic) == [1, 2, 3, 1]


def test_assign_partitions_takes_observed_bytes_into_account(fake_cluster: Cluster) -> None:
    first = _topic(fake_cluster, "big", 3)
    assign_partitions(first)
    PartitionAssignment.objects.filter(topic=first, broker__broker_id=1).update(size_bytes=10**9)
    PartitionAssignment.objects.filter(topic=first, broker__broker_id=3).update(size_bytes=10)
    second = _topic(fake_cluster, "small", 2)
    assign_partitions(second)
    assert _placement(second) == [2, 3]


def test_assign_partitions_without_brokers_fails(fake_cluster: Cluster) -> None:
    fake_cluster.brokers.update(phase=BrokerPhase.STOPPED)
    with pytest.raises(NoBrokerAvailable):
        assign_partitions(_topic(fake_cluster, "orders", 1))
    assert not PartitionAssignment.objects.exists()


# -- replicas ------------------------------------------------------------------------------
@given(loads, st.integers(0, 60), st.integers(1, 8))
def test_each_partition_gets_rf_distinct_brokers(
    current: list[BrokerLoad], count: int, rf: int
) -> None:
    if rf > len(current):
        if count:
            with pytest.raises(NoBrokerAvailable):
                plan_replicas(current, count, rf)
        return
    plans = plan_replicas(current, count, rf)
    assert len(plans) == count
    known = {load.broker_id for load in current}
    for replicas in plans:
        assert len(replicas) == rf == len(set(replicas))
        assert set(replicas) <= known


@given(broker_ids, st.integers(0, 60), st.integers(1, 8))
def test_on_an_empty_cluster_leaders_and_replicas_spread_evenly(
    ids: list[int], count: int, rf: int
) -> None:
    rf = min(rf, len(ids))
    plans = plan_replicas([BrokerLoad(b, 0, 0) for b in ids], count, rf)
    leaders = Counter(r[0] for r in plans)
    held = Counter(b for r in plans for b in r)
    assert max(leaders.get(b, 0) for b in ids) - min(leaders.get(b, 0) for b in ids) <= 1
    assert max(held.get(b, 0) for b in ids) - min(held.get(b, 0) for b in ids) <= 1
    if len(ids) > 1:
        assert all(a[0] != b[0] for a, b in pairwise(plans))


@given(loads, st.integers(0, 60), st.integers(1, 4))
def test_replica_plans_are_deterministic_and_rf1_is_the_single_placement(
    current: list[BrokerLoad], count: int, rf: int
) -> None:
    rf = min(rf, len(current))
    assert plan_replicas(current, count, rf) == plan_replicas(list(reversed(current)), count, rf)
    assert [r[0] for r in plan_replicas(current, count, 1)] == plan_placement(current, count)


def test_three_brokers_rf3_rotate_the_preferred_leader() -> None:
    plans = plan_replicas([BrokerLoad(b, 0, 0) for b in (1, 2, 3)], 3, 3)
    assert plans == [[1, 2, 3], [2, 1, 3], [3, 1, 2]]


def test_assign_partitions_writes_replicas_and_a_full_isr(fake_cluster: Cluster) -> None:
    topic = _topic(fake_cluster, "replicated", 3)
    topic.replication_factor = 3
    topic.save()
    assign_partitions(topic)
    rows = list(topic.assignments.order_by("partition").select_related("broker"))
    assert [r.replicas for r in rows] == [[1, 2, 3], [2, 1, 3], [3, 1, 2]]
    assert all(r.isr == r.replicas and r.broker.broker_id == r.replicas[0] for r in rows)
    too_many = _topic(fake_cluster, "too-many", 1)
    too_many.replication_factor = 4  # broker 4 is stopped: three can hold replicas
    too_many.save()
    with pytest.raises(NoBrokerAvailable):
        assign_partitions(too_many)


def test_unreachable_brokers_get_no_new_replicas_while_enough_others_answer(
    fake_cluster: Cluster,
) -> None:
    Broker.objects.filter(cluster=fake_cluster, broker_id=4).update(phase=BrokerPhase.READY)
    Broker.objects.filter(cluster=fake_cluster, broker_id=2).update(phase=BrokerPhase.UNREACHABLE)
    topic = _topic(fake_cluster, "avoids-2", 4)
    topic.replication_factor = 3
    topic.save()
    assign_partitions(topic)
    assert all(2 not in r.replicas for r in topic.assignments.all())
    # Three replicas and only two other brokers answering: the unreachable one is used.
    Broker.objects.filter(cluster=fake_cluster, broker_id=4).update(phase=BrokerPhase.STOPPED)
    needs_all = _topic(fake_cluster, "needs-2", 1)
    needs_all.replication_factor = 3
    needs_all.save()
    assign_partitions(needs_all)
    assert sorted(needs_all.assignments.get().replicas) == [1, 2, 3]
