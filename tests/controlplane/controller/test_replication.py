"""Replication driven by the real controller process, end to end: real broker processes
(a ``static`` cluster), a real Celery worker reconciling topics, real Postgres.

- an RF=3 topic created through the API becomes ready, led by its preferred replica
  with every follower in sync; SIGKILLing its leader makes the controller elect a
  follower from the ISR, acks=all producers go on, the broker's return puts it back in
  the ISR and leadership returns to it; every acknowledged record is read once, in order;
- with every in-sync replica dead, a topic without unclean election stays offline
  (leader -1) until an in-sync replica returns, one that opted in elects a live
  out-of-sync replica;
- reassigning a partition and decommissioning a broker through the API move replicas
  (new ones added first, caught up, then the old ones deleted) without losing a record.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from controlplane.regions import services
from controlplane.regions.models import Broker, Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics.models import PartitionAssignment, Topic
from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc
from dataplane.client import Consumer, Producer, TopicPartition
from tests.controlplane.conftest import ClientFactory
from tests.controlplane.controller.conftest import ADMIN, Fleet, wait_until
from tests.support.brokers import BrokerProcess, stop_all
from tests.support.controlplane import CeleryWorker, make_tenant, route_tasks_to, unique_queue

LAG_MS = 1500
CLUSTER = "far"


@dataclass
class Replicated:
    """A static cluster of broker processes, a controller process, a Celery worker."""

    fleet: Fleet
    cluster: Cluster
    brokers: dict[int, BrokerProcess]
    tenant: Tenant

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    def row(self, topic: str, partition: int = 0) -> PartitionAssignment:
        return PartitionAssignment.objects.select_related("leader").get(
            topic__full_name=topic, partition=partition
        )

    def leader(self, topic: str, partition: int = 0) -> int | None:
        row = self.row(topic, partition)
        return row.leader.broker_id if row.leader is not None else None


def _start_brokers(root: Path, count: int) -> dict[int, BrokerProcess]:
    args = ["--cluster-id", CLUSTER, "--replica-lag-time-max-ms", str(LAG_MS)]
    brokers = {
        i: BrokerProcess(root / f"b{i}", broker_id=i, extra_args=args) for i in range(1, count + 1)
    }
    for broker in brokers.values():
        broker.start()
    return brokers


def _replicated(fleet: Fleet, tmp_path: Path, count: int) -> Iterator[Replicated]:
    cluster = services.create_cluster(
        fleet.region, name=CLUSTER, provisioner="static", broker_count=count, actor=ADMIN
    )
    brokers = _start_brokers(tmp_path / "brokers", count)
    worker = CeleryWorker(unique_queue(), tmp_path)
    try:
        for broker in brokers.values():
            services.register_broker(cluster, broker_id=broker.broker_id, host="127.0.0.1",
                                     port=broker.port, actor=ADMIN)  # fmt: skip
        tenant = make_tenant("acme", region=fleet.region)
        with worker, route_tasks_to(worker.queue):
            fleet.start_controller("a")
            wait_until(lambda: _all_ready(cluster), 30, "brokers ready")
            yield Replicated(fleet, cluster, brokers, tenant)
    finally:
        stop_all(brokers.values())


def _all_ready(cluster: Cluster) -> bool:
    return all(b.phase == "ready" for b in Broker.objects.filter(cluster=cluster))


@pytest.fixture
def three(fleet: Fleet, tmp_path: Path) -> Iterator[Replicated]:
    yield from _replicated(fleet, tmp_path, 3)


@pytest.fixture
def four(fleet: Fleet, tmp_path: Path) -> Iterator[Replicated]:
    yield from _replicated(fleet, tmp_path, 4)


def _state(broker: BrokerProcess, topic: str) -> dict[int, admin_pb2.PartitionState]:
    with broker.channel() as channel:
        response = admin_pb2_grpc.AdminStub(channel).DescribeState(
            admin_pb2.DescribeStateRequest(topics=[topic]), timeout=10
        )
    return {p.partition: p for p in response.partitions if p.topic == topic}


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 1) -> None:
    """acks=all; every record must be acknowledged."""
    with Producer(bootstrap, acks="all", max_block_ms=30_000, delivery_timeout_ms=60_000) as p:
        futures = [p.send(topic, v, partition=i % partitions) for i, v in enumerate(values)]
        p.flush(60)
        for future in futures:
            future.result(1)


def _send_all(producer: Producer, topic: str, values: list[bytes]) -> None:
    """Send ``values`` to partition 0 and wait until every one is acknowledged."""
    futures = [producer.send(topic, v, partition=0) for v in values]
    producer.flush(60)
    for future in futures:
        future.result(1)


def _consume(bootstrap: str, topic: str, count: int, partitions: int = 1) -> dict[int, list[bytes]]:
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    seen: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])

        def enough() -> bool:
            for record in consumer.poll(timeout_ms=200):
                seen[record.partition].append(record.value)
            return sum(len(v) for v in seen.values()) >= count

        wait_until(enough, 30, f"consuming {count} records of {topic}")
        time.sleep(0.5)  # anything beyond ``count`` would be a duplicate: let it show
        for record in consumer.poll(timeout_ms=200):
            seen[record.partition].append(record.value)
    finally:
        consumer.close()
    return seen


def _create(client: APIClient, name: str, **fields: object) -> str:
    body = {"name": name, "partitions": 1, **fields}
    response = client.post("/api/v1/topics", body, format="json")
    assert response.status_code == 201, response.content
    full_name = str(response.json()["full_name"])
    wait_until(lambda: Topic.objects.get(full_name=full_name).status == "ready", 30, "ready")
    return full_name


def _in_sync_everywhere(r: Replicated, topic: str, brokers: set[int], offset: int) -> bool:
    row = r.row(topic)
    if set(row.isr) != brokers:
        return False
    return all(_state(r.brokers[b], topic)[0].log_end_offset == offset for b in brokers)


def test_an_rf3_topic_fails_over_from_the_isr_and_its_preferred_leader_comes_back(
    three: Replicated, client_for: ClientFactory
) -> None:
    client = client_for(roles={three.tenant.slug: "developer"})
    topic = _create(client, "orders")
    row = three.row(topic)
    preferred = row.replicas[0]
    assert three.tenant.topics.get().min_insync_replicas == 2
    assert sorted(row.replicas) == [1, 2, 3]
    wait_until(lambda: three.leader(topic) == preferred, 10, "the preferred replica leads")

    producer = Producer(three.bootstrap, acks="all", max_block_ms=30_000,
                        delivery_timeout_ms=60_000)  # fmt: skip
    try:
        first = [b"before-%d" % i for i in range(50)]
        _send_all(producer, topic, first)
        wait_until(lambda: _in_sync_everywhere(three, topic, {1, 2, 3}, 50), 15, "in sync")
        roles = {b: _state(three.brokers[b], topic)[0].role for b in (1, 2, 3)}
        assert roles == {b: "leader" if b == preferred else "follower" for b in (1, 2, 3)}

        epoch = three.row(topic).leader_epoch
        three.brokers[preferred].kill()
        killed = time.monotonic()
        new_leader = wait_until(
            lambda: (lead := three.leader(topic)) not in (None, preferred) and lead,
            15,
            "failover",
        )
        print(f"failover: a new leader elected {time.monotonic() - killed:.2f} s after SIGKILL")
        row = three.row(topic)
        assert new_leader in row.replicas[1:]
        assert row.leader_epoch == epoch + 1
        assert preferred not in row.isr
        # The same producer goes on (min ISR 2 of the two live replicas).
        second = [b"after-%d" % i for i in range(50)]
        _send_all(producer, topic, second)
    finally:
        producer.close()

    three.brokers[preferred].start()
    wait_until(lambda: preferred in three.row(topic).isr, 30, "the old leader back in the ISR")
    wait_until(lambda: three.leader(topic) == preferred, 30, "preferred leader back")
    assert three.row(topic).leader_epoch == epoch + 2
    seen = _consume(three.bootstrap, topic, 100)
    assert seen[0] == first + second
    wait_until(lambda: _in_sync_everywhere(three, topic, {1, 2, 3}, 100), 15, "all in sync")


def test_unclean_election_only_for_the_topic_that_opted_in(
    three: Replicated, client_for: ClientFactory
) -> None:
    client = client_for(roles={three.tenant.slug: "developer"})
    clean = _create(client, "clean")
    unclean = _create(client, "unclean", unclean_leader_election=True)
    for topic in (clean, unclean):
        wait_until(lambda t=topic: three.leader(t) is not None, 10, "leaders")
    # Two topics, same replicas order: kill all but the last, then the last.
    PartitionAssignment.objects.filter(topic__full_name=unclean).update(
        replicas=three.row(clean).replicas, isr=three.row(clean).isr
    )
    order = three.row(clean).replicas
    for broker_id in order[:2]:
        three.brokers[broker_id].kill()
        wait_until(lambda b=broker_id: all(b not in three.row(t).isr for t in (clean, unclean)),
                   15, f"broker {broker_id} out of the ISRs")  # fmt: skip
    last = order[2]
    assert three.row(clean).isr == [last]
    three.brokers[last].kill()
    wait_until(lambda: three.leader(clean) is None, 15, "clean topic offline")
    wait_until(lambda: three.leader(unclean) is None, 15, "unclean topic offline: no live replica")
    assert three.row(clean).isr == [last]  # the last in-sync replica is remembered

    out_of_sync = order[0]
    three.brokers[out_of_sync].start()
    wait_until(lambda: three.leader(unclean) == out_of_sync, 15, "unclean election")
    assert three.row(unclean).isr == [out_of_sync]
    time.sleep(1.0)  # several ticks: the clean topic must stay offline
    assert three.leader(clean) is None

    three.brokers[last].start()
    wait_until(lambda: three.leader(clean) == last, 15, "the in-sync replica elected on return")


def test_reassignment_and_decommission_move_replicas_without_losing_records(
    four: Replicated, client_for: ClientFactory, admin_client: APIClient
) -> None:
    client = client_for(roles={four.tenant.slug: "developer"})
    topic = _create(client, "moving", partitions=2)
    for partition in (0, 1):
        wait_until(lambda p=partition: four.leader(topic, p) is not None, 10, "leaders")
    values = [b"v-%d" % i for i in range(80)]
    _produce(four.bootstrap, topic, values, partitions=2)

    # A reassignment first: partition 0's preferred leader is replaced by the spare broker.
    old = four.row(topic, 0).replicas
    (spare,) = set(four.brokers) - set(old)
    target = [spare, *old[1:]]
    body = {"partitions": [{"partition": 0, "replicas": target}]}
    moved = admin_client.post(f"/api/v1/topics/{topic}/reassign", body, format="json")
    assert moved.status_code == 202, moved.content
    wait_until(
        lambda: (r := four.row(topic, 0)).target_replicas is None and not r.removing_replicas,
        60,
        "reassignment done",
    )
    row = four.row(topic, 0)
    assert (row.replicas, four.leader(topic, 0)) == (target, spare)
    assert 0 not in _state(four.brokers[old[0]], topic)  # deleted on the broker it left
    assert _state(four.brokers[spare], topic)[0].log_end_offset == 40  # caught up

    holders = {b for p in (0, 1) for b in four.row(topic, p).replicas}
    leaving = min(holders)
    broker = Broker.objects.get(cluster=four.cluster, broker_id=leaving)
    response = admin_client.post(f"/api/v1/brokers/{broker.pk}/decommission")
    assert response.status_code == 202, response.content

    wait_until(
        lambda: Broker.objects.get(pk=broker.pk).phase == "decommissioned", 60, "decommissioned"
    )
    for partition in (0, 1):
        row = four.row(topic, partition)
        assert leaving not in row.replicas
        assert (row.target_replicas, row.removing_replicas) == (None, [])
        assert len(row.replicas) == 3
    assert _state(four.brokers[leaving], topic) == {}  # deleted there
    seen = _consume(four.bootstrap, topic, 80, partitions=2)
    assert seen[0] == values[0::2]
    assert seen[1] == values[1::2]
