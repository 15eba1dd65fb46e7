"""Tiered storage across leader changes: three real brokers share one object store; the
leader moves twice (once by election, once by SIGKILL) while an idempotent acks=all
producer writes and segments upload. The remote manifest then tiles the offsets with no
gap and no overlap, every listed object is whole, uploads came from more than one
leader, and an SDK consumer reading from the earliest offset gets every acknowledged
record exactly once, most of them from the remote tier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from dataplane.client import Consumer, Producer, TopicPartition
from dataplane.tiered import manifests
from dataplane.tiered.store import ObjectStore
from tests.dataplane.broker.support import wait_for
from tests.support.brokers import BrokerProcess, start_cluster, stop_all
from tests.support.replication import TestController

TOPIC = "acme.tiered-failover"
RECORDS = 600
TOPIC_ID = "11"


@pytest.fixture
def tiered_cluster(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[dict[int, BrokerProcess], TestController, Path]]:
    store_dir = tmp_path / "objects"
    args = ["--remote-store-uri", str(store_dir), "--tier-interval-ms", "100"]
    brokers = start_cluster(tmp_path, 3, extra_args=[*args, "--replica-lag-time-max-ms", "1500"])
    controller = TestController(brokers)
    try:
        yield {b.broker_id: b for b in brokers}, controller.start(), store_dir
    finally:
        controller.stop()
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            for broker in brokers:
                print(f"===== log of {broker!r} =====\n{broker.log_text()[-15000:]}")
        stop_all(brokers)


def test_leader_changes_during_uploads_leave_one_remote_copy_of_every_offset(
    tiered_cluster: tuple[dict[int, BrokerProcess], TestController, Path],
) -> None:
    brokers, controller, store_dir = tiered_cluster
    controller.create_topic(
        TOPIC,
        [1, 2, 3],
        min_isr=2,
        remote_storage=True,
        max_segment_bytes=4096,
        local_retention_bytes=0,
        topic_id=TOPIC_ID,
    )
    store = ObjectStore.open(str(store_dir))
    values = [b"v%05d-" % i + b"y" * 200 for i in range(RECORDS)]
    bootstrap = [b.address for b in brokers.values()]
    with Producer(
        bootstrap,
        acks="all",
        linger_ms=1,
        batch_bytes=700,
        retry_backoff_ms=50,
        delivery_timeout_ms=60_000,
    ) as producer:
        futures = []
        for i, value in enumerate(values):
            futures.append(producer.send(TOPIC, value, partition=0))
            if i == RECORDS // 3:
                futures[-1].result(15)
                _wait_uploaded(store, 50)
                controller.elect(TOPIC, 0, leader=2, isr=[1, 2, 3])
            if i == 2 * RECORDS // 3:
                futures[-1].result(15)
                _wait_uploaded(store, 250)
                brokers[2].kill()
                controller.elect(TOPIC, 0, leader=3, isr=[1, 3])
        producer.flush(60)
        offsets = [f.result(0).offset for f in futures]
    assert offsets == list(range(RECORDS))
    _wait_uploaded(store, RECORDS - 60)
    manifest = manifests.latest(store, TOPIC, TOPIC_ID, 0)
    assert manifest.log_start_offset == 0
    end = 0
    for segment in manifest.segments:
        assert segment.start_offset == end  # no gap, no overlap
        end = segment.end_offset
        for kind, (size, crc) in segment.files.items():
            data = store.get(segment.key(TOPIC, TOPIC_ID, 0, kind))
            assert (len(data), crc32c.crc32c(data)) == (size, crc)
    assert len({s.leader_epoch for s in manifest.segments}) >= 2  # uploaded by several leaders
    consumer = Consumer(
        bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, retry_backoff_ms=50
    )
    consumed = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        assert wait_for(
            lambda: consumed.extend(consumer.poll(200)) or len(consumed) >= RECORDS, timeout_s=60
        )
    finally:
        consumer.close()
    assert [r.offset for r in consumed] == list(range(RECORDS))
    assert [r.value for r in consumed] == values


def _wait_uploaded(store: ObjectStore, end: int) -> None:
    def done() -> bool:
        try:
            return manifests.latest(store, TOPIC, TOPIC_ID, 0).end_offset >= end
        except Exception:
            return False

    assert wait_for(done, timeout_s=60), f"the manifest never reached {end}"
