"""A tiered topic written by a real broker, and what the SDK reads of it, for the
``meridian`` data source's tests.

``TieredCluster``: one broker with authentication on (tokens from ``TestIssuer``) and an
object store (a folder, or S3 through its options), tiering every 100 ms; topics are made
with small segments and nothing kept locally once uploaded, so most records are only in
the store. ``write_events`` produces batches compressed with every codec, with headers,
null keys and null values (tombstones), at known timestamps; ``append_control_batch``
puts a transaction marker in a partition's log (clients cannot write one, so it is
appended to the stopped broker's log as a leader's marker would be);
``consume`` is what the SDK consumer reads; ``rows`` what a DataFrame holds, comparable.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, common_pb2
from dataplane.client import Admin, Consumer, ConsumerRecord, TopicPartition
from dataplane.records import BatchBuilder, Compression, Header, Record
from dataplane.storage.log import PartitionLog
from dataplane.tiered.reader import TopicStoreReader
from tests.dataplane.broker.auth.support import Caller, caller
from tests.dataplane.storage.support import wait_for
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer

TIMEOUT_S = 15
# The first record's timestamp, each next one 1 s later: within the topics' retention.
T0_MS = (int(time.time()) - 24 * 3600) * 1000
CODECS = (
    Compression.NONE,
    Compression.GZIP,
    Compression.LZ4,
    Compression.ZSTD,
    Compression.SNAPPY,
)
# About five batches of ten records per segment: several segments sealed and uploaded.
TIERED = {"remote_storage": True, "max_segment_bytes": 4096, "local_retention_bytes": 0}


@dataclass
class TieredCluster:
    broker: BrokerProcess
    issuer: TestIssuer
    store_uri: str
    store_options: dict[str, Any]

    @property
    def address(self) -> str:
        return self.broker.address

    def token(self, tenant: str = "acme") -> str:
        return self.issuer.token(tenants={tenant: "developer"})

    @contextmanager
    def internal(self) -> Iterator[Caller]:
        with caller(self.address, self.issuer.internal_token()) as c:
            yield c

    def store(self) -> TopicStoreReader:
        return TopicStoreReader(self.store_uri, self.store_options)

    def options(self, topic: str, **extra: str) -> dict[str, str]:
        """Data source options reading ``topic`` from the store."""
        import json

        options = {"topic": topic, "store": self.store_uri}
        if self.store_options:
            options["storeOptions"] = json.dumps(self.store_options)
        return options | extra


def create_tiered(c: Caller, topic: str, partitions: int, topic_id: str) -> None:
    config = common_pb2.PartitionConfig(**TIERED, topic_id=topic_id)
    specs = [
        admin_pb2.PartitionSpec(topic=topic, partition=p, config=config) for p in range(partitions)
    ]
    response = c.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(partitions=specs), timeout=TIMEOUT_S
    )
    assert all(r.error == 0 for r in response.results), response


def event(i: int) -> Record:
    """The ``i``-th record written: every 7th has no key, every 11th no value."""
    key = None if i % 7 == 3 else b"key-%d" % (i % 13)
    digest = hashlib.sha256(b"%d" % i).hexdigest().encode()  # compresses as real data does
    value = None if i % 11 == 5 else b"event-%06d-" % i + digest
    headers = (Header("source", b"test"), Header("trace", None), Header("source", b"%d" % i))
    return Record(0, T0_MS + i * 1000, key, value, headers if i % 3 else ())


def write_events(
    c: Caller, topic: str, partition: int, first: int, count: int, per_batch: int = 10
) -> None:
    """Records ``first .. first+count-1`` (``event``), the batches cycling through
    ``CODECS``."""
    for n, at in enumerate(range(first, first + count, per_batch)):
        builder = BatchBuilder(compression=CODECS[n % len(CODECS)])
        for i in range(at, min(at + per_batch, first + count)):
            r = event(i)
            builder.append(r.value, key=r.key, timestamp=r.timestamp, headers=r.headers)
        request = broker_pb2.ProduceRequest(
            acks=1,
            partitions=[
                broker_pb2.PartitionRecords(
                    topic=topic, partition=partition, records=builder.build()
                )
            ],
        )
        (result,) = c.broker.Produce(request, timeout=TIMEOUT_S).results
        assert result.error == 0, result


def append_control_batch(broker: BrokerProcess, topic: str, partition: int) -> int:
    """A commit marker appended to the partition's log while its broker is stopped;
    its offset. The broker is running again when this returns."""
    broker.terminate()
    log = PartitionLog.open(broker.data_dir / f"{topic}-{partition}")
    try:
        offset = log.log_end_offset
        headers = [h for _, h in log.batch_headers(0)]
        epoch = max((h.partition_leader_epoch for h in headers), default=0)
        written_at = max(h.max_timestamp for h in headers)  # in time with the log
        marker = BatchBuilder(
            is_control=True,
            is_transactional=True,
            producer_id=4242,
            producer_epoch=0,
            base_offset=offset,
            partition_leader_epoch=epoch,
        )
        commit = (b"\x00\x00\x00\x00\x00\x00", b"\x00\x00\x00\x01")
        marker.append(commit[0], key=commit[1], timestamp=written_at)
        log.append(marker.build(), assign_offsets=False)
    finally:
        log.close()
    broker.start()
    return offset


def state(c: Caller, topic: str) -> list[admin_pb2.PartitionState]:
    response = c.admin.DescribeState(
        admin_pb2.DescribeStateRequest(topics=[topic]), timeout=TIMEOUT_S
    )
    return sorted(response.partitions, key=lambda s: s.partition)


def wait_uploaded(c: Caller, topic: str, *, min_segments: int, timeout_s: float = 60) -> None:
    """Until every partition has ``min_segments`` uploaded, none waiting, and its local
    log starts past its first record (the oldest are only in the store)."""

    def done() -> bool:
        return all(
            s.remote_segments >= min_segments and s.upload_lag_ms == 0 and s.log_start_offset > 0
            for s in state(c, topic)
        )

    assert wait_for(done, timeout_s=timeout_s), state(c, topic)


def consume(address: str, token: str, topic: str, partitions: int) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its high watermark, read by the SDK consumer."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Admin(address, credentials=token) as admin:
        ends = {
            tp: end for tp, (end, _) in admin.list_offsets(dict.fromkeys(tps, "latest")).items()
        }
    consumer = Consumer(address, auto_offset_reset="earliest", credentials=token)
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        got: list[ConsumerRecord] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "the consumer did not reach the end"
            got += consumer.poll(timeout_ms=200)
        return [r for r in got if r.offset < ends[r.topic_partition]]
    finally:
        consumer.close()


Row = tuple[
    str, int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], str | None
]


def sdk_rows(records: list[ConsumerRecord]) -> list[Row]:
    """The SDK's records as (topic, partition, offset, timestamp ms, key, value,
    headers, lane), sorted."""
    return sorted(
        (r.topic, r.partition, r.offset, r.timestamp, r.key, r.value, list(r.headers), r.lane)
        for r in records
    )


def rows(table: Any) -> list[Row]:
    """A DataFrame's Arrow table (``df.toArrow()``) in the same shape, sorted."""
    out = []
    for r in table.to_pylist():
        millis = round(r["timestamp"].timestamp() * 1000)
        headers = [(h["key"], h["value"]) for h in r["headers"]]
        out.append(
            (
                r["topic"],
                r["partition"],
                r["offset"],
                millis,
                r["key"],
                r["value"],
                headers,
                r["lane"],
            )
        )
    return sorted(out)
