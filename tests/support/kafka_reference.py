"""kafka-python's independent record codec, as the tests' reference: batches it builds
and what it reads from ours."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from dataplane.records import Compression

# (key, value, timestamp, headers) as both codecs take them.
Spec = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]
# (offset, timestamp, key, value, headers) as both codecs report them.
Seen = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def kafka_build(specs: Sequence[Spec], codec: Compression, **producer: Any) -> bytes:
    """A batch built by kafka-python's independent builder."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=producer.get("is_transactional", False),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 30,
    )
    for offset, (key, value, timestamp, headers) in enumerate(specs):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


def kafka_read(data: bytes) -> tuple[list[Any], list[Seen]]:
    """Batches and records as kafka-python decodes ``data``; every CRC must check."""
    batches, seen = [], []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        batches.append(batch)
        seen += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return batches, seen
