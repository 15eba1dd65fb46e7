"""The controller's side of lanes, with the controller's tick in this process against
real broker processes (a ``static`` cluster), a real Celery worker reconciling topics and
real Postgres: every push declares the lanes; a broker's demand for a lane topic becomes
a topic on the brokers within the tick and the reconcile that follows; a change of a
lane's liveness is pushed at once; the idle GC deletes a lane topic from the brokers.

The brokers' lane reports (demands, lane consumers) are added to their real answers by
``ReportingPusher`` as a broker makes them — a demand until a push lists the topic —
so the controller's handling is checked whatever the brokers of this tree report."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controlplane.controller.controller import Controller
from controlplane.controller.lease import FileLease
from controlplane.controller.push import MetadataPusher, PushOutcome
from controlplane.lanes import services as lanes
from controlplane.lanes.models import Lane, LaneTopic
from controlplane.lanes.tasks import collect_idle_lanes
from controlplane.regions import services as regions
from controlplane.regions.models import Broker, Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from controlplane.topics.services import create_topic
from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.client import Producer
from tests.controlplane.controller.conftest import ADMIN, wait_until
from tests.support.brokers import BrokerProcess, metadata, stop_all
from tests.support.controlplane import CeleryWorker, make_tenant, route_tasks_to, unique_queue

pytestmark = pytest.mark.django_db(transaction=True)

LANE_TOPIC = "acme.orders~ppe"


class ReportingPusher(MetadataPusher):
    """The real pusher; keeps every request it sent (``requests``) and adds to each
    broker's real answer a demand for each of ``demanded`` the request did not list, and
    ``consumers`` as its lane consumers."""

    def __init__(self) -> None:
        super().__init__(timeout_s=2.0)
        self.requests: list[admin_pb2.UpdateMetadataRequest] = []
        self.demanded: set[str] = set()
        self.consumers: list[admin_pb2.LaneConsumers] = []

    def push(
        self, brokers: Sequence[Broker], request: admin_pb2.UpdateMetadataRequest
    ) -> dict[int, PushOutcome]:
        outcomes = super().push(brokers, request)
        sent = admin_pb2.UpdateMetadataRequest()
        sent.CopyFrom(request)
        self.requests.append(sent)
        listed = {topic.name for topic in request.topics}
        for outcome in outcomes.values():
            if outcome.response is not None:
                outcome.response.lane_topic_demands.extend(sorted(self.demanded - listed))
                outcome.response.lane_consumers.extend(self.consumers)
        return outcomes


@dataclass
class World:
    cluster: Cluster
    brokers: list[BrokerProcess]
    tenant: Tenant
    controller: Controller
    pusher: ReportingPusher

    def tick(self) -> list[admin_pb2.UpdateMetadataRequest]:
        """One tick; the pushes it made."""
        before = len(self.pusher.requests)
        self.controller.tick()
        return self.pusher.requests[before:]

    def settle(self) -> None:
        """Tick until a tick pushes once (nothing left to elect or announce)."""
        wait_until(lambda: len(self.tick()) == 1, 20, "a quiet tick")

    def trunk(self) -> Topic:
        topic: Topic = create_topic(
            self.tenant, name="orders", partitions=2, replication_factor=1, actor=ADMIN
        )
        wait_until(lambda: _status(topic.full_name) == "ready", 20, "trunk ready")
        self.settle()
        return topic


def _status(full_name: str) -> str:
    return Topic.objects.filter(full_name=full_name).values_list("status", flat=True).first() or ""


@pytest.fixture
def world(transactional_db: None, tmp_path: Path) -> Iterator[World]:
    region = regions.create_region(name="lane-region", actor=ADMIN)
    cluster = regions.create_cluster(
        region, name="far", provisioner="static", broker_count=2, actor=ADMIN
    )
    brokers = [
        BrokerProcess(tmp_path / f"b{i}", broker_id=i, extra_args=["--cluster-id", "far"])
        for i in (1, 2)
    ]
    worker = CeleryWorker(unique_queue(), tmp_path)
    try:
        for broker in brokers:
            broker.start()
            regions.register_broker(cluster, broker_id=broker.broker_id, host="127.0.0.1",
                                    port=broker.port, actor=ADMIN)  # fmt: skip
        pusher = ReportingPusher()
        controller = Controller(
            region.name, "c1", FileLease(tmp_path / "lease.lock"), pusher=pusher
        )
        with worker, route_tasks_to(worker.queue):
            world = World(cluster, brokers, make_tenant("acme", region=region), controller, pusher)
            world.settle()
            yield world
    finally:
        print(f"===== celery worker log =====\n{worker.log_text()[-6000:]}")
        stop_all(brokers)


def test_every_push_declares_every_live_tenants_lanes(world: World) -> None:
    lanes.create_lane(world.tenant, name="ppe", consume_trunk=True, actor=ADMIN)
    gone = make_tenant("globex")
    lanes.create_lane(gone, name="qa-team", actor=ADMIN)
    Tenant.objects.filter(pk=gone.pk).update(status="deleting")
    for request in world.tick():
        assert request.lanes_listed
        assert list(request.lanes) == [
            admin_pb2.LaneDeclaration(
                tenant="acme", name="ppe", all_topics=True, consume_trunk=True,
                orphan_policy="trunk",
            )
        ]  # fmt: skip


def test_a_demand_becomes_a_lane_topic_the_brokers_serve(world: World) -> None:
    world.trunk()
    lanes.create_lane(world.tenant, name="ppe", actor=ADMIN)
    world.pusher.demanded.add(LANE_TOPIC)

    started = time.monotonic()
    pushes = world.tick()
    # Created and elected in the tick, and pushed again at once: the demand ends.
    topic = Topic.objects.get(full_name=LANE_TOPIC)
    assert topic.trunk is not None
    assert topic.trunk.full_name == "acme.orders"
    assert len(pushes) == 2
    listed = {t.name: t for t in pushes[-1].topics}
    assert LANE_TOPIC in listed
    assert all(p.leader_id > 0 for p in listed[LANE_TOPIC].partitions)

    wait_until(lambda: _status(LANE_TOPIC) == "ready", 20, "lane topic ready")
    world.tick()
    served = metadata(world.brokers[0], [LANE_TOPIC]).topics
    assert [len(t.partitions) for t in served if t.name == LANE_TOPIC] == [2]
    bootstrap = ",".join(b.address for b in world.brokers)
    with Producer(bootstrap, max_block_ms=20_000) as producer:
        assert producer.send(LANE_TOPIC, b"lane record").result(timeout=20).offset == 0
    print(f"demand to first lane ack: {(time.monotonic() - started) * 1000:.0f} ms")
    assert Topic.objects.filter(full_name=LANE_TOPIC).count() == 1
    assert len(world.tick()) == 1  # listed now: no demand, nothing to push again


def test_an_undeclared_lane_is_demanded_in_vain(world: World) -> None:
    world.trunk()
    world.pusher.demanded.add("acme.orders~nope")
    world.tick()
    assert not Topic.objects.filter(trunk__isnull=False).exists()


def test_a_change_of_liveness_is_pushed_at_once(world: World, settings: Any) -> None:
    world.trunk()
    lanes.create_lane(world.tenant, name="ppe", actor=ADMIN)
    world.settle()
    world.pusher.consumers = [
        admin_pb2.LaneConsumers(group_id="acme.billing~ppe", topics=[LANE_TOPIC])
    ]
    pushes = world.tick()
    assert len(pushes) == 2
    assert [list(lane.live_topics) for lane in pushes[-1].lanes] == [["acme.orders"]]
    assert Lane.objects.get(name="ppe").live_topics == ["acme.orders"]
    assert len(world.tick()) == 1  # still live: nothing new to tell

    world.pusher.consumers = []
    assert len(world.tick()) == 1  # held down: a consumer's restart orphans nothing
    assert Lane.objects.get(name="ppe").live_topics == ["acme.orders"]
    settings.LANE_ORPHAN_AFTER_S = 0
    pushes = world.tick()
    assert len(pushes) == 2
    assert [list(lane.live_topics) for lane in pushes[-1].lanes] == [[]]


def test_with_a_broker_silent_a_lane_can_become_live_but_not_stop(
    world: World, settings: Any
) -> None:
    settings.LANE_ORPHAN_AFTER_S = 0  # only the silence keeps the lane live below
    world.trunk()
    lanes.create_lane(world.tenant, name="ppe", actor=ADMIN)
    world.settle()
    world.brokers[1].terminate()
    world.tick()
    world.pusher.consumers = [
        admin_pb2.LaneConsumers(group_id="acme.billing~ppe", topics=[LANE_TOPIC])
    ]
    pushes = world.tick()
    assert Lane.objects.get(name="ppe").live_topics == ["acme.orders"]
    assert [list(lane.live_topics) for lane in pushes[-1].lanes] == [["acme.orders"]]

    world.pusher.consumers = []  # the silent broker may be the one seeing them
    world.tick()
    assert Lane.objects.get(name="ppe").live_topics == ["acme.orders"]


def test_the_gc_deletes_an_idle_lane_topic_from_the_brokers(world: World) -> None:
    world.trunk()
    lanes.create_lane(world.tenant, name="ppe", ttl_s=1, actor=ADMIN)
    world.pusher.demanded.add(LANE_TOPIC)
    world.tick()
    wait_until(lambda: _status(LANE_TOPIC) == "ready", 20, "lane topic ready")
    link = LaneTopic.objects.get(topic__full_name=LANE_TOPIC)
    assert link.last_traffic_at is None

    def collected() -> bool:
        return LANE_TOPIC in collect_idle_lanes()["lane_topics"]

    wait_until(collected, 10, "the lane topic collected after its TTL")
    wait_until(lambda: _status(LANE_TOPIC) == "", 20, "lane topic row gone (reconciled)")
    wait_until(
        lambda: not Lane.objects.filter(name="ppe").exists() or collect_idle_lanes()["lanes"],
        10,
        "the idle lane collected too",
    )
    assert not Lane.objects.filter(name="ppe").exists()
    assert Topic.objects.get(full_name="acme.orders").status == "ready"  # the trunk stays
    world.pusher.demanded.clear()
    world.tick()
    assert not [t for t in metadata(world.brokers[0], [LANE_TOPIC]).topics if t.partitions]
