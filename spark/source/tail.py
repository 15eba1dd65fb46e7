"""The brokers' side of a read: what the caller's token may see, and the unsealed tail.

``Brokers(bootstrap, token)`` asks the cluster, through the SDK and with the caller's
token, for the topics it lists, a topic's partitions and offsets (earliest, latest: the
high watermark, or the first at a timestamp). ``read_tail`` reads one partition's
``[start, end)`` through Fetch with the SDK consumer (assigned, seeked, polled until its
position reaches ``end``): the records past what the store holds, as Arrow batches.

Every call carries the token, so the brokers' authorisation decides: a token of another
tenant gets the SDK's typed ``MeridianError`` (``TOPIC_AUTHORIZATION_FAILED``), never data.

Thread safety: a ``Brokers`` is used from one thread; ``read_tail`` makes its own consumer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Final

import pyarrow as pa

from dataplane.client import Admin, Consumer, ConsumerRecord, TopicPartition
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import Header, Record
from spark import columns

POLL_MS: Final = 500
# A tail read that makes no progress for this long fails instead of hanging its task.
STALL_S: Final = 60.0


class Brokers:
    """The cluster as the caller's token sees it; see the module docstring."""

    def __init__(self, bootstrap: str, token: str | None) -> None:
        self._admin = Admin(bootstrap, client_id="meridian-spark", credentials=token)

    def topics(self) -> list[str]:
        return list(self._admin.list_topics())

    def partitions(self, topic: str) -> list[int]:
        return self._admin.metadata.partitions_for(topic)

    def offsets(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition the offset a spec names (EARLIEST -2, LATEST -1 or a timestamp
        in ms: the first offset at or after it, -1 when none)."""
        if not specs:
            return {}
        found = self._admin.list_offsets(dict(specs))
        return {tp: offset for tp, (offset, _timestamp) in found.items()}

    def close(self) -> None:
        self._admin.close()


def read_tail(
    bootstrap: str, token: str | None, topic: str, partition: int, start: int, end: int
) -> Iterator[pa.RecordBatch]:
    """The records of ``[start, end)`` of one partition, fetched from the brokers."""
    consumer = Consumer(
        bootstrap,
        client_id="meridian-spark",
        auto_offset_reset="none",
        enable_auto_commit=False,
        credentials=token,
    )
    try:
        consumer.partitions_for(topic)  # the brokers' verdict on the token, typed, first
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        yield from columns.record_batches(topic, partition, _records_until(consumer, tp, end))
    finally:
        consumer.close()


def _records_until(consumer: Consumer, tp: TopicPartition, end: int) -> Iterator[Record]:
    """Polls until the consumer's position reaches ``end`` (control batches and gaps
    move it without records)."""
    stalled_at = time.monotonic()
    position = consumer.position(tp)
    while position < end:
        yield from _as_records(r for r in consumer.poll(timeout_ms=POLL_MS) if r.offset < end)
        moved = consumer.position(tp)
        if moved > position:
            position, stalled_at = moved, time.monotonic()
        elif time.monotonic() - stalled_at > STALL_S:
            raise MeridianError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{tp.topic}/{tp.partition}: no record past {position} in {STALL_S:.0f} s "
                f"(reading up to {end})",
            )


def _as_records(consumed: Iterable[ConsumerRecord]) -> Iterator[Record]:
    for r in consumed:
        headers = tuple(Header(key, value) for key, value in r.headers)
        yield Record(r.offset, r.timestamp, r.key, r.value, headers)
