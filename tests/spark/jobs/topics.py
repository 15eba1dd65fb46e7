"""Tiered topics for the Spark job tests: records appended to a real partition log
(``dataplane.storage``), its sealed segments uploaded and listed in a remote manifest
with tiered storage's own code (``dataplane.tiered``, through the helpers of
``tests/dataplane/tiered/support.py``), and the oracle of every user record appended
(the sealed part in the store, the rest standing for what the brokers still hold)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataplane.records import BatchBuilder, Compression, Header, Record
from dataplane.storage.log import PartitionLog
from dataplane.tiered.layout import RemoteSegment
from dataplane.tiered.store import ObjectStore
from tests.dataplane.tiered.support import commit, log_config, upload_log

# 2025-11-28 03:20:00 UTC: a few thousand records two seconds apart cross hours.
BASE_MS = 1_764_300_000_000
SEGMENT_BYTES = 24 * 1024


@dataclass
class Row:
    """One record to produce."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int = BASE_MS
    headers: tuple[Header, ...] = ()


@dataclass
class TieredTopic:
    """One partition of a topic, written through a local log to the store."""

    store: ObjectStore
    directory: Path
    topic: str
    partition: int = 0
    topic_id: str = "7"
    log: PartitionLog = field(init=False)
    uploaded: list[RemoteSegment] = field(default_factory=list)
    appended: dict[int, Record] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.log = PartitionLog.open(
            self.directory / f"{self.topic}-{self.partition}", log_config(SEGMENT_BYTES)
        )

    def produce(self, rows: Sequence[Row], per_batch: int = 8, *, control_every: int = 0) -> None:
        """Append ``rows`` in batches (every 3rd gzip); with ``control_every``, a
        transaction marker after every that many batches."""
        for n, start in enumerate(range(0, len(rows), per_batch)):
            builder = BatchBuilder(compression=Compression.GZIP if n % 3 == 2 else Compression.NONE)
            chunk = rows[start : start + per_batch]
            for row in chunk:
                builder.append(row.value, key=row.key, timestamp=row.timestamp, headers=row.headers)
            info = self.log.append(builder.build())
            for offset, row in zip(
                range(info.base_offset, info.last_offset + 1), chunk, strict=True
            ):
                self.appended[offset] = Record(
                    offset, row.timestamp, row.key, row.value, row.headers
                )
            if control_every and n % control_every == control_every - 1:
                self.log.append(_commit_marker(row.timestamp))

    def seal(self) -> None:
        """Roll the log, upload the segments not uploaded yet, commit a manifest."""
        self.log.roll()
        self.log.update_high_watermark(self.log.log_end_offset)
        done = {s.base_offset for s in self.uploaded}
        fresh = [
            s
            for s in upload_log(
                self.store,
                self.log,
                topic=self.topic,
                topic_id=self.topic_id,
                partition=self.partition,
            )
            if s.base_offset not in done
        ]
        self.uploaded.extend(fresh)
        commit(
            self.store,
            self.uploaded,
            topic=self.topic,
            topic_id=self.topic_id,
            partition=self.partition,
        )

    @property
    def store_end(self) -> int:
        return self.uploaded[-1].end_offset if self.uploaded else 0

    def records(self, start: int = 0, end: int | None = None) -> list[Record]:
        return [
            r for o, r in sorted(self.appended.items()) if o >= start and (end is None or o < end)
        ]

    def close(self) -> None:
        self.log.close()


def _commit_marker(timestamp: int) -> bytes:
    builder = BatchBuilder(is_control=True, is_transactional=True, producer_id=9, producer_epoch=0)
    builder.append(b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x01", timestamp=timestamp)
    return builder.build()


def order(n: int, **extra: Any) -> bytes:
    """The JSON value of order ``n``: a user id of seven, a country, an amount, padding."""
    body = {
        "user": {"id": n % 7},
        "country": ["fr", "de", "us"][n % 3],
        "amount": n * 1.5,
        "paid": n % 2 == 0,
        "note": "x" * 60,
        **extra,
    }
    return json.dumps(body).encode()


def orders(start: int, count: int, *, step_ms: int = 2000) -> list[Row]:
    return [
        Row(
            order(n),
            key=f"k{n}".encode(),
            timestamp=BASE_MS + n * step_ms,
            headers=(Header("trace", f"t{n}".encode()),) if n % 4 == 0 else (),
        )
        for n in range(start, start + count)
    ]


def tail_of(topics: dict[str, list[TieredTopic]]) -> Any:
    """A ``TailReader`` serving each partition's records past the store's end."""

    def tail(topic: str, partition: int, start: int) -> Iterator[Record]:
        for part in topics.get(topic, []):
            if part.partition == partition:
                yield from part.records(start)

    return tail
