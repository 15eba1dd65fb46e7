"""The controller's tick, in this process, against real broker processes: liveness from
heartbeats, the local provisioner starting and restarting brokers, leader epochs, and
stepping down when deposed. The leases against real Postgres and a real file lock."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import psycopg
import pytest
from django.conf import settings
from django.utils import timezone

from controlplane.controller.controller import Controller
from controlplane.controller.lease import FileLease, PostgresAdvisoryLease, lease_for
from controlplane.controller.push import MetadataPusher
from controlplane.provisioning.local import LocalProvisioner
from controlplane.regions import services
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.regions.provisioners import Provisioner, get_provisioner
from controlplane.topics.models import PartitionAssignment
from dataplane._gen.meridian.v1 import admin_pb2
from tests.controlplane.controller.conftest import ADMIN, add_topic, push, wait_until
from tests.support.brokers import BrokerProcess, metadata, stop_all

SESSION_TIMEOUT_S = 1.0


@pytest.fixture
def region(db: None, settings) -> Region:  # type: ignore[no-untyped-def]
    settings.BROKER_SESSION_TIMEOUT_S = SESSION_TIMEOUT_S
    return services.create_region(name="tick-region", actor=ADMIN)


@pytest.fixture
def static_brokers(region: Region, tmp_path: Path) -> Iterator[tuple[Cluster, list[BrokerProcess]]]:
    """A ``static`` cluster of two broker processes, registered by address."""
    cluster = services.create_cluster(
        region, name="far", provisioner="static", broker_count=2, actor=ADMIN
    )
    processes = [
        BrokerProcess(tmp_path / f"b{i}", broker_id=i, extra_args=["--cluster-id", "far"])
        for i in (1, 2)
    ]
    try:
        for process in processes:
            process.start()
            services.register_broker(
                cluster, broker_id=process.broker_id, host="127.0.0.1", port=process.port,
                actor=ADMIN,
            )  # fmt: skip
        yield cluster, processes
    finally:
        stop_all(processes)


@pytest.fixture
def local_provisioner(tmp_path: Path) -> Iterator[LocalProvisioner]:
    provisioner = LocalProvisioner(tmp_path / "data")
    try:
        yield provisioner
    finally:
        for broker in Broker.objects.filter(pid__isnull=False):
            if provisioner.is_running(broker):
                assert broker.pid is not None
                os.kill(broker.pid, signal.SIGKILL)


def _controller(
    region: Region, tmp_path: Path, provisioner: Provisioner | None = None, name: str = "c1"
) -> Controller:
    return Controller(
        region.name,
        name,
        FileLease(tmp_path / f"{region.name}.lock"),
        provisioner_for=(lambda cluster: provisioner) if provisioner else get_provisioner,
        pusher=MetadataPusher(timeout_s=1.0),
    )


def _phases(cluster: Cluster) -> dict[int, str]:
    return dict(cluster.brokers.values_list("broker_id", "phase"))


def _tick_until(controller: Controller, condition, what: str, timeout_s: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    def ticked() -> bool:
        controller.tick()
        return bool(condition())

    wait_until(ticked, timeout_s, what)


def test_a_killed_broker_goes_unreachable_and_comes_back_ready(
    static_brokers: tuple[Cluster, list[BrokerProcess]], region: Region, tmp_path: Path
) -> None:
    cluster, processes = static_brokers
    controller = _controller(region, tmp_path)
    controller.tick()
    assert controller.active
    assert _phases(cluster) == {1: "ready", 2: "ready"}
    assert Cluster.objects.get(pk=cluster.pk).status == "ready"
    first = cluster.brokers.get(broker_id=1)
    assert first.last_heartbeat_at is not None
    assert first.version

    processes[0].kill()
    _tick_until(controller, lambda: _phases(cluster)[1] == "unreachable", "broker 1 unreachable")
    gone = cluster.brokers.get(broker_id=1)
    assert "no heartbeat" in gone.phase_reason
    assert _phases(cluster)[2] == "ready"
    shown = Cluster.objects.get(pk=cluster.pk)
    assert (shown.status, shown.status_reason) == ("ready", "not answering: broker 1")

    processes[0].start()  # same data directory and port
    _tick_until(controller, lambda: _phases(cluster)[1] == "ready", "broker 1 ready again")
    assert cluster.brokers.get(broker_id=1).phase_reason == ""
    assert Cluster.objects.get(pk=cluster.pk).status_reason == ""


def test_the_local_provisioner_starts_a_cluster_and_restarts_a_killed_broker(
    region: Region, tmp_path: Path, local_provisioner: LocalProvisioner
) -> None:
    cluster = services.create_cluster(
        region, name="main", provisioner="local", broker_count=2, actor=ADMIN
    )
    controller = _controller(region, tmp_path, local_provisioner)
    controller.tick()
    brokers = {b.broker_id: b for b in cluster.brokers.all()}
    assert {i: b.phase for i, b in brokers.items()} == {1: "ready", 2: "ready"}
    for broker_id, broker in brokers.items():
        assert local_provisioner.is_running(broker)
        assert broker.port
        assert broker.pid
        expected = tmp_path / "data" / region.name / "main" / f"broker-{broker_id}"
        assert broker.data_dir == str(expected)
    # Each broker was told of the other (as a static peer) and of the push.
    assert sorted(b.id for b in metadata(_process_view(brokers[1])).brokers) == [1, 2]

    old = brokers[2]
    assert old.pid is not None
    os.kill(old.pid, signal.SIGKILL)
    wait_until(lambda: not local_provisioner.is_running(old), 10, "broker 2 dead")
    controller.tick()
    back = cluster.brokers.get(broker_id=2)
    assert (back.address, back.data_dir) == (old.address, old.data_dir)
    assert back.pid != old.pid
    assert local_provisioner.is_running(back)
    assert back.phase == BrokerPhase.READY


class _Address:
    """Enough of a ``BrokerProcess`` for ``tests.support.brokers.metadata``."""

    def __init__(self, address: str) -> None:
        self.address = address

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address)


def _process_view(broker: Broker) -> BrokerProcess:
    return _Address(broker.address)  # type: ignore[return-value]


def test_a_change_of_leader_bumps_the_leader_epoch_and_is_pushed(
    static_brokers: tuple[Cluster, list[BrokerProcess]], region: Region, tmp_path: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    """The preferred replica (replicas[0]) takes leadership back once it is live and in
    the ISR: a new epoch, pushed to every broker with the replicas and ISR."""
    settings.PREFERRED_LEADER_DELAY_S = 0
    cluster, processes = static_brokers
    topic = add_topic(cluster, "moves", 1)
    controller = _controller(region, tmp_path)
    controller.tick()
    assignment = PartitionAssignment.objects.get(topic=topic, partition=0)
    assert (assignment.leader.broker_id, assignment.leader_epoch) == (1, 0)

    second = cluster.brokers.get(broker_id=2)
    PartitionAssignment.objects.filter(pk=assignment.pk).update(replicas=[2, 1], isr=[1, 2])
    controller.tick()
    assignment.refresh_from_db()
    assert (assignment.leader_id, assignment.leader_epoch) == (second.pk, 1)
    assert assignment.broker_id == second.pk  # the preferred replica's row
    for process in processes:
        (found,) = metadata(process, [topic.full_name]).topics
        assert [(p.leader_id, p.leader_epoch) for p in found.partitions] == [(2, 1)]
    controller.tick()
    assignment.refresh_from_db()
    assert assignment.leader_epoch == 1  # unchanged leader: unchanged epoch


def test_a_leader_restarted_within_the_session_timeout_still_loses_leadership(
    static_brokers: tuple[Cluster, list[BrokerProcess]], region: Region, tmp_path: Path, settings
) -> None:  # type: ignore[no-untyped-def]
    """A broker back before it was missed reported a smaller uptime: its partitions get
    a new leader from the ISR (it may have lost what it held) and it leaves the ISR."""
    settings.BROKER_SESSION_TIMEOUT_S = 60  # no silence will be noticed
    settings.PREFERRED_LEADER_DELAY_S = 60
    cluster, processes = static_brokers
    topic = add_topic(cluster, "restarts", 1)
    row = PartitionAssignment.objects.get(topic=topic)
    PartitionAssignment.objects.filter(pk=row.pk).update(replicas=[1, 2], isr=[1, 2])
    controller = _controller(region, tmp_path)
    controller.tick()
    row.refresh_from_db()
    assert (row.leader.broker_id, row.leader_epoch) == (1, 0)
    controller.tick()  # a second answer: the uptime it is compared with

    processes[0].restart()
    controller.tick()
    row.refresh_from_db()
    assert (row.leader.broker_id, row.leader_epoch) == (2, 1)
    assert (row.isr, row.isr_version) == ([2], 1)
    assert _phases(cluster) == {1: "ready", 2: "ready"}


def test_a_controller_refused_by_a_broker_of_a_newer_controller_steps_down(
    static_brokers: tuple[Cluster, list[BrokerProcess]], region: Region, tmp_path: Path
) -> None:
    cluster, processes = static_brokers
    controller = _controller(region, tmp_path)
    controller.tick()
    assert controller.active
    newer = services.take_over_region(region.name, controller_id="elsewhere", actor=ADMIN)
    push(
        processes[0].address,
        admin_pb2.UpdateMetadataRequest(
            controller_id="elsewhere", controller_epoch=newer, cluster_id=cluster.name
        ),
    )
    controller.tick()
    assert not controller.active
    assert not controller.lease.held()


def test_a_broker_ahead_of_the_region_is_outranked_and_the_others_still_served(
    static_brokers: tuple[Cluster, list[BrokerProcess]], region: Region, tmp_path: Path
) -> None:
    """A broker holding an epoch the database never issued (a restored database, a
    recreated region): the controller stays active, keeps serving the other brokers,
    and advances its epoch until the broker accepts it."""
    cluster, processes = static_brokers
    controller = _controller(region, tmp_path)
    controller.tick()
    ahead = controller.epoch + 3
    push(
        processes[0].address,
        admin_pb2.UpdateMetadataRequest(
            controller_id="restored", controller_epoch=ahead, cluster_id=cluster.name
        ),
    )
    before = timezone.now()
    for _ in range(5):
        controller.tick()
        assert controller.active
    assert controller.epoch == ahead  # a broker accepts its own epoch again
    region.refresh_from_db()
    assert region.controller_epoch == controller.epoch
    for broker in cluster.brokers.all():
        assert broker.phase == BrokerPhase.READY
        assert broker.last_heartbeat_at is not None
        assert broker.last_heartbeat_at >= before


def test_a_controller_whose_region_was_taken_over_steps_down(
    region: Region, tmp_path: Path
) -> None:
    controller = _controller(region, tmp_path)
    controller.tick()
    assert controller.active
    assert controller.epoch == 1
    services.take_over_region(region.name, controller_id="other", actor=ADMIN)
    controller.tick()
    assert not controller.active
    # Once the lease is free again it takes over with a newer epoch.
    controller.tick()
    assert controller.active
    assert controller.epoch == 3


def test_a_standby_does_nothing_while_another_holds_the_lease(
    region: Region, tmp_path: Path
) -> None:
    active = _controller(region, tmp_path, name="active")
    standby = _controller(region, tmp_path, name="standby")
    active.tick()
    standby.tick()
    assert (active.active, standby.active) == (True, False)
    assert Region.objects.get(pk=region.pk).controller_id == "active"
    active.close()
    standby.tick()
    assert standby.active
    assert Region.objects.get(pk=region.pk).controller_epoch == 2


def _pg_lease(name: str) -> PostgresAdvisoryLease:
    return PostgresAdvisoryLease(name, settings.DATABASES["default"])


def test_the_postgres_lease_is_exclusive_and_freed_when_its_session_ends(db: None) -> None:
    first, second = _pg_lease("lease-test"), _pg_lease("lease-test")
    other_region = _pg_lease("lease-test-2")
    try:
        assert first.acquire()
        assert not second.acquire()
        assert other_region.acquire()
        assert first.held()
        # The session dies (as when the holder's process or network does).
        assert first._conn is not None
        backend = first._conn.info.backend_pid
        with psycopg.connect(**_conninfo()) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [backend])
        wait_until(second.acquire, 10, "the lock freed")
        assert not first.held()
        assert not first.acquire()
    finally:
        for lease in (first, second, other_region):
            lease.release()


def _conninfo() -> dict[str, object]:
    db = settings.DATABASES["default"]
    return {
        "host": db["HOST"],
        "port": db["PORT"],
        "user": db["USER"],
        "password": db["PASSWORD"],
        "dbname": db["NAME"],
        "autocommit": True,
    }


def test_the_file_lease_is_exclusive_until_released(tmp_path: Path) -> None:
    first, second = FileLease(tmp_path / "r.lock"), FileLease(tmp_path / "r.lock")
    assert first.acquire()
    assert not second.acquire()
    first.release()
    assert second.acquire()
    assert second.held()
    assert not first.held()
    second.release()


def test_the_lease_follows_the_database_engine(db: None) -> None:
    assert isinstance(lease_for("any"), PostgresAdvisoryLease)
