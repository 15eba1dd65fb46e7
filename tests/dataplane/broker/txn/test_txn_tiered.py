"""Transactions on a tiered topic: segments upload only below the last stable offset,
each with the aborted transactions it holds, so a read_committed consumer reading from
the remote tier, and the object-store reader (Spark's), leave aborted records out as a
local read does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.client import Admin, Producer, TopicPartition
from dataplane.tiered.reader import TopicStoreReader
from tests.dataplane.broker.support import stubs
from tests.dataplane.broker.txn.support import ends, read_topic, values
from tests.dataplane.storage.support import wait_for
from tests.support.brokers import BrokerProcess, tiered_process

TOPIC = "acme.tiered-txn"
TIERED = {
    "remote_storage": True,
    "max_segment_bytes": 4096,
    "local_retention_bytes": 0,
    "topic_id": "11",
}


@pytest.fixture
def broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    with tiered_process(
        tmp_path / "broker-1", ["--remote-store-uri", str(tmp_path / "objects")], request
    ) as process:
        yield process


def remote_end(broker: BrokerProcess) -> int:
    with stubs(broker) as s:
        request = admin_pb2.DescribeStateRequest(topics=[TOPIC])
        (state,) = s.admin.DescribeState(request, timeout=10).partitions
        return int(state.remote_end_offset)


def local_start(broker: BrokerProcess) -> int:
    with stubs(broker) as s:
        request = admin_pb2.DescribeStateRequest(topics=[TOPIC])
        (state,) = s.admin.DescribeState(request, timeout=10).partitions
        return int(state.log_start_offset)


def test_remote_reads_leave_aborted_transactions_out(broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = broker.address
    with Admin(bootstrap) as admin:
        admin.create_topic(TOPIC, 1, TIERED)
    kept: list[bytes] = []
    producer = Producer(bootstrap, transactional_id="acme.tiered", linger_ms=0, batch_bytes=1024)
    try:
        producer.init_transactions()
        for round_ in range(12):
            commit = round_ % 3 != 1
            producer.begin_transaction()
            batch = [
                b"%s-%02d-%02d-" % (b"keep" if commit else b"drop", round_, i) + b"x" * 200
                for i in range(8)
            ]
            for value in batch:
                producer.send(TOPIC, value, partition=0)
            producer.flush()
            (producer.commit_transaction if commit else producer.abort_transaction)()
            if commit:
                kept += batch
        producer.begin_transaction()
        producer.send(TOPIC, b"open", partition=0)
        producer.flush()
        stable = ends(bootstrap, [TopicPartition(TOPIC, 0)], committed=True)[
            TopicPartition(TOPIC, 0)
        ]
        # uploads stop at the open transaction; what is below it leaves the disk
        assert wait_for(lambda: remote_end(broker) >= stable - 20, 60)
        assert remote_end(broker) <= stable
        assert wait_for(lambda: local_start(broker) > 0, 60)
        assert values(read_topic(bootstrap, TOPIC, 1, committed=True)) == sorted(kept)
        producer.commit_transaction()
    finally:
        producer.close()
    with Producer(bootstrap, linger_ms=0) as plain:  # fills (so seals) the open segment
        for i in range(30):
            plain.send(TOPIC, b"after-%02d-" % i + b"x" * 200, partition=0).result()
    assert wait_for(lambda: remote_end(broker) > stable, 60)
    store = TopicStoreReader(str(tmp_path / "objects"))
    manifest = store.manifest(TOPIC, 0)
    remote = [r.value for r in store.records(TOPIC, 0, end_offset=manifest.end_offset)]
    assert remote  # what Spark reads: the committed records only, in order
    assert all(value.startswith((b"keep", b"open", b"after")) for value in remote)
    expected = [*kept, b"open"] + [b"after-%02d-" % i + b"x" * 200 for i in range(30)]
    assert remote == expected[: len(remote)]
