"""Controller processes of one region: one active, a standby that takes over when it is
SIGKILLed (a new epoch, which brokers accept while refusing the old one), and brokers
that keep serving produce and consume while no controller runs, also across a broker
restart. Real Postgres, real controller and broker processes."""

from __future__ import annotations

import os
import signal
import time

import grpc
import pytest
from django.utils import timezone

from controlplane.regions import services
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster
from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, broker_pb2_grpc
from dataplane.client import Consumer, ErrorCode, Producer, TopicPartition
from dataplane.errors import error_from_rpc
from tests.controlplane.controller.conftest import (
    ADMIN,
    Fleet,
    add_topic,
    create_partitions,
    push,
    wait_until,
)

BROKERS = 2
PARTITIONS = 2


def _local_cluster(fleet: Fleet) -> Cluster:
    return services.create_cluster(
        fleet.region, name="main", provisioner="local", broker_count=BROKERS, actor=ADMIN
    )


def _all_ready(cluster: Cluster, after: object = None) -> bool:
    brokers = list(cluster.brokers.all())
    return all(
        b.phase == BrokerPhase.READY and (after is None or b.last_heartbeat_at > after)
        for b in brokers
    )


def _round_trip(bootstrap: str, topic: str, tag: str) -> None:
    """Produce one record to every partition and consume them back, with the SDK."""
    values = {f"{tag}-{p}".encode(): p for p in range(PARTITIONS)}
    with Producer(bootstrap, max_block_ms=15_000, delivery_timeout_ms=15_000) as producer:
        futures = [producer.send(topic, value, partition=p) for value, p in values.items()]
        producer.flush(20)
        assert sorted(f.result(1).partition for f in futures) == list(range(PARTITIONS))
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        seen: dict[bytes, int] = {}

        def all_seen() -> bool:
            for record in consumer.poll(timeout_ms=200):
                seen[record.value] = record.partition
            return set(values) <= set(seen)

        wait_until(all_seen, 20, f"consuming {tag}")
        assert {v: seen[v] for v in values} == values
    finally:
        consumer.close()


def _addresses(cluster: Cluster) -> list[str]:
    return [b.address for b in cluster.brokers.order_by("broker_id")]


def test_a_standby_takes_over_when_the_active_controller_is_killed(fleet: Fleet) -> None:
    cluster = _local_cluster(fleet)
    fleet.start_controller("a")
    fleet.start_controller("b")
    wait_until(lambda: _all_ready(cluster), 30, "brokers started and ready")
    first, epoch = fleet.active_controller()
    assert first in ("a", "b")
    standby = "b" if first == "a" else "a"
    topic = add_topic(cluster, "orders", PARTITIONS)
    create_partitions(topic)
    wait_until(lambda: _leaders_pushed(cluster, topic.full_name), 10, "leaders pushed")
    _round_trip(_addresses(cluster)[0], topic.full_name, "before")

    fleet.kill_controller(first)
    killed_at = timezone.now()
    started = time.monotonic()
    wait_until(lambda: fleet.active_controller() == (standby, epoch + 1), 10, "takeover")
    print(f"standby active {time.monotonic() - started:.2f} s after the SIGKILL")
    wait_until(lambda: _all_ready(cluster, after=killed_at), 10, "heartbeats to the new one")
    # The brokers accepted the new epoch: the deposed controller's is refused.
    stale = admin_pb2.UpdateMetadataRequest(
        controller_id=first, controller_epoch=epoch, cluster_id=cluster.name
    )
    for address in _addresses(cluster):
        with pytest.raises(grpc.RpcError) as refused:
            push(address, stale)
        assert error_from_rpc(refused.value).code == ErrorCode.STALE_CONTROLLER_EPOCH
    _round_trip(_addresses(cluster)[1], topic.full_name, "after")
    assert fleet.controllers[standby].poll() is None


def test_brokers_serve_without_a_controller_and_after_a_restart(fleet: Fleet) -> None:
    cluster = _local_cluster(fleet)
    fleet.start_controller("only")
    wait_until(lambda: _all_ready(cluster), 30, "brokers started and ready")
    topic = add_topic(cluster, "events", PARTITIONS)
    create_partitions(topic)
    wait_until(lambda: _leaders_pushed(cluster, topic.full_name), 10, "leaders pushed")
    # Every broker has answered a push built after the topic existed (two heartbeats:
    # the first may answer a push built just before), so every saved push names it.
    for _ in range(2):
        since = timezone.now()
        wait_until(lambda t=since: _all_ready(cluster, after=t), 10, "a push after the topic")
    fleet.kill_controller("only")
    _round_trip(_addresses(cluster)[0], topic.full_name, "no-controller")

    # Restart broker 1 (SIGKILL, same address) with no controller, while the other
    # brokers are down too: the test plays the provisioner. Its peers cannot tell it
    # anything, so only its saved push can name the leaders of their partitions.
    provisioner = fleet.provisioner()
    leaders = {a.partition: a.broker.broker_id for a in topic.assignments.select_related("broker")}
    assert set(leaders.values()) - {1}, "the topic must have a partition on another broker"
    brokers = list(cluster.brokers.order_by("broker_id"))
    for broker in brokers:
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGKILL)
    for broker in brokers:
        wait_until(lambda b=broker: not provisioner.is_running(Broker.objects.get(pk=b.pk)), 10)
    first = brokers[0]
    provisioner.ensure_broker(Broker.objects.get(pk=first.pk))
    restarted = Broker.objects.get(pk=first.pk)
    assert (restarted.address, restarted.pid != first.pid) == (first.address, True)
    with grpc.insecure_channel(restarted.address) as channel:
        response = broker_pb2_grpc.BrokerStub(channel).Metadata(
            broker_pb2.MetadataRequest(topics=[topic.full_name]), timeout=5
        )
    (found,) = response.topics
    assert {p.partition: p.leader_id for p in found.partitions} == leaders
    for broker in brokers[1:]:
        provisioner.ensure_broker(Broker.objects.get(pk=broker.pk))
    _round_trip(restarted.address, topic.full_name, "after-restart")


def _leaders_pushed(cluster: Cluster, topic: str) -> bool:
    """Whether every broker's Metadata names a leader for each partition of ``topic``."""
    for address in _addresses(cluster):
        with grpc.insecure_channel(address) as channel:
            response = broker_pb2_grpc.BrokerStub(channel).Metadata(
                broker_pb2.MetadataRequest(topics=[topic]), timeout=5
            )
        (found,) = response.topics
        if len(found.partitions) != PARTITIONS:
            return False
        if any(p.error or p.leader_id < 0 for p in found.partitions):
            return False
    return True
