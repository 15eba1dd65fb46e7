"""The local provisioner's brokers serve Kafka's protocol beside gRPC: both ports are
chosen once (distinct), kept in the ``Broker`` row across restarts and recorded from the
broker's ready file; a row that has a gRPC port but no Kafka port yet (made before
brokers had a Kafka listener) gets one and keeps its gRPC port."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.core.actors import Actor
from controlplane.provisioning.local import LocalProvisioner
from controlplane.regions import services
from controlplane.regions.models import Broker, Cluster
from dataplane.local import free_ports
from tests.support.controlplane import wait_until

pytestmark = [pytest.mark.processes, pytest.mark.django_db]
ADMIN = Actor.system("test")


@pytest.fixture
def provisioner(tmp_path: Path) -> Iterator[LocalProvisioner]:
    local = LocalProvisioner(tmp_path / "data")
    try:
        yield local
    finally:
        for broker in Broker.objects.filter(pid__isnull=False):
            if local.is_running(broker):
                assert broker.pid is not None
                os.kill(broker.pid, signal.SIGKILL)


@pytest.fixture
def cluster() -> Cluster:
    region = services.create_region(name="kafka-region", actor=ADMIN)
    return services.create_cluster(
        region, name="main", provisioner="local", broker_count=2, actor=ADMIN
    )


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_every_broker_gets_a_kafka_port_of_its_own_kept_across_a_restart(
    cluster: Cluster, provisioner: LocalProvisioner
) -> None:
    provisioner.ensure_brokers(list(cluster.brokers.all()))
    brokers = list(cluster.brokers.order_by("broker_id"))
    ports = [p for b in brokers for p in (b.port, b.kafka_port)]
    assert None not in ports
    assert len(set(ports)) == 4, ports
    for broker in brokers:
        assert broker.kafka_port is not None
        assert broker.kafka_address == f"127.0.0.1:{broker.kafka_port}"
        command = provisioner.command(broker)
        assert _flag(command, "--kafka-listen") == broker.kafka_address
        assert _flag(command, "--listen") == broker.address
        ready = json.loads(provisioner.paths(broker).ready_file.read_text())
        assert ready["kafka_port"] == broker.kafka_port
        assert _accepts(broker.kafka_port)

    old = brokers[1]
    assert old.pid is not None
    os.kill(old.pid, signal.SIGKILL)
    wait_until(lambda: not provisioner.is_running(old), timeout_s=10)
    provisioner.ensure_brokers(list(cluster.brokers.all()))
    back = cluster.brokers.get(broker_id=2)
    assert back.pid != old.pid
    assert (back.address, back.kafka_address) == (old.address, old.kafka_address)
    assert _accepts(old.kafka_port)  # type: ignore[arg-type]


def test_a_broker_without_a_kafka_port_gets_one_and_keeps_its_grpc_port(
    cluster: Cluster, provisioner: LocalProvisioner
) -> None:
    (port,) = free_ports(1)
    cluster.brokers.filter(broker_id=1).update(port=port)
    provisioner.ensure_brokers(list(cluster.brokers.all()))
    broker = cluster.brokers.get(broker_id=1)
    assert broker.port == port
    assert broker.kafka_port not in (None, port)
    assert _accepts(broker.kafka_port)  # type: ignore[arg-type]
