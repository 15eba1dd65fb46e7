"""The SDK honours ``throttle_ms``: no new request to a broker until ``throttle_ms`` after
the throttled request was sent. The broker here holds a response at most 300 ms
(``quota_max_hold_ms``), far less than the throttle time, so only the client's own wait
can cover the rest; checks bound times from below only."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc
from dataplane.client import Admin, Consumer, Producer, TopicPartition
from tests.support.brokers import BrokerProcess, stop_all

KIB = 1024
HOLD_MS = 300


@pytest.fixture
def capped_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    config = tmp_path / "broker.toml"
    config.write_text(f"quota_max_hold_ms = {HOLD_MS}\n")
    process = BrokerProcess(tmp_path / "b1", broker_id=1, extra_args=["--config", str(config)])
    try:
        yield process.start()
    finally:
        stop_all([process])


def push_quota(broker: BrokerProcess, **rates: int) -> None:
    request = admin_pb2.UpdateMetadataRequest(
        controller_id="test",
        controller_epoch=1,
        cluster_id="meridian",
        quotas=[admin_pb2.TenantQuota(tenant="acme", **rates)],
    )
    with broker.channel() as channel:
        admin_pb2_grpc.AdminStub(channel).UpdateMetadata(request, timeout=10)


def metric(broker: BrokerProcess, name: str, label: str) -> float:
    """The sum of ``name``'s samples whose labels include ``label`` (``key="value"``)."""
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and label in line
    )


def fetch_requests(broker: BrokerProcess) -> float:
    return metric(broker, "meridian_broker_requests_total", 'rpc="Fetch"')


def test_the_producer_waits_out_the_throttle_time_before_its_next_request(
    capped_broker: BrokerProcess,
) -> None:
    with Admin(capped_broker.address) as admin:
        admin.create_topic("acme.in", 1)
    push_quota(capped_broker, produce_bytes_per_s=100 * KIB)
    with Producer(capped_broker.address, linger_ms=0, enable_idempotence=False) as producer:
        producer.send("acme.in", b"w").result(10)  # metadata and the stream are ready
        started = time.monotonic()
        producer.send("acme.in", b"x" * 400 * KIB).result(30)  # ~3 s owed at 100 KiB/s
        producer.send("acme.in", b"y").result(30)
        both_s = time.monotonic() - started
    held_s = metric(capped_broker, "meridian_broker_throttle_seconds_total", 'tenant="acme"')
    assert 0 < held_s <= HOLD_MS / 1000 * 2  # the broker's part: capped holds
    # The second record could not be sent before the throttle time (from the first's send).
    assert both_s >= (400 - 100) / 100 * 0.95, f"answered after {both_s:.2f} s"


def test_the_consumer_does_not_fetch_again_while_throttled(capped_broker: BrokerProcess) -> None:
    with Admin(capped_broker.address) as admin:
        admin.create_topic("acme.out", 1)
    with Producer(capped_broker.address, linger_ms=5) as producer:
        for _ in range(40):
            producer.send("acme.out", b"z" * 10 * KIB, partition=0)
        producer.flush(30)
    push_quota(capped_broker, fetch_bytes_per_s=100 * KIB)  # ~400 KiB: ~3 s owed
    with Consumer(capped_broker.address, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("acme.out", 0)])
        got: list[object] = []
        while len(got) < 40:
            got += consumer.poll(5_000)
        fetched_at, fetches = time.monotonic(), fetch_requests(capped_broker)
        while time.monotonic() - fetched_at < 1.0:  # well inside the ~3 s throttle time
            assert consumer.poll(100) == []
        assert fetch_requests(capped_broker) == fetches, "fetched again while throttled"
        with Producer(capped_broker.address) as producer:
            producer.send("acme.out", b"later", partition=0).result(10)
        later: list[object] = []
        deadline = time.monotonic() + 30
        while not later and time.monotonic() < deadline:
            later = consumer.poll(500)
    assert [r.value for r in later] == [b"later"]  # type: ignore[attr-defined]
