"""What the leader of a timer partition writes into it: move intents, requeues and
cancellations.

A marker is a record of its own batch (no producer id) with the header
``x-delay-marker: move``, ``requeue`` or ``cancel``, a null key and a binary value.
Clients cannot write one: the schedule path refuses any record carrying the header.

A **move intent** (``MoveIntent``) is written, and committed (below the high watermark),
before the records it names are sent to their topics. It says exactly what will be
sent, so that any later leader can send it again byte for byte and let the targets'
idempotence drop what already landed: the producer id and epoch, and per target
partition the base sequence, the record count of each batch (at most
``producers.CACHED_BATCHES``, which the target remembers) and the timer offsets of the
records in the order sent. Value layout, big-endian:

```
u8 version (1) | i64 producer id | i16 producer epoch | u32 targets
per target: u16 topic length | topic (UTF-8) | i32 partition | i32 base sequence
            | u16 batches | u32 records per batch ... | i64 timer offset per record ...
```

A **requeue** names records of the last intent that a target refused without storing
them (a batch too large, a producer sequence the target no longer follows) and that
are to be moved again: pending from then on, with their due time and the offset their
id names (their first offset, when carried forward):
``u8 version (1) | u32 count | (i64 offset, i64 due ms, i64 id offset) ...``.

A **cancellation** lists the timer offsets it cancels:
``u8 version (1) | u32 count | i64 offset ...``.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from dataplane.delays import DELAY_MARKER
from dataplane.records import BatchBuilder, Record

MOVE = b"move"
REQUEUE = b"requeue"
CANCEL = b"cancel"
_VERSION = 1
_MOVE_HEAD = struct.Struct(">BqhI")
_TARGET_HEAD = struct.Struct(">iiH")
_U16 = struct.Struct(">H")
_COUNT = struct.Struct(">BI")


class MarkerError(ValueError):
    """A marker whose value does not parse."""


@dataclass(frozen=True, slots=True)
class TargetMove:
    """The records of one round for one target partition, as sent."""

    topic: str
    partition: int
    base_sequence: int
    batch_counts: tuple[int, ...]
    offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MoveIntent:
    producer_id: int
    producer_epoch: int
    targets: tuple[TargetMove, ...]

    def offsets(self) -> list[int]:
        return [offset for target in self.targets for offset in target.offsets]


def encode_move(intent: MoveIntent) -> bytes:
    out = bytearray(
        _MOVE_HEAD.pack(_VERSION, intent.producer_id, intent.producer_epoch, len(intent.targets))
    )
    for target in intent.targets:
        name = target.topic.encode()
        out += _U16.pack(len(name)) + name
        out += _TARGET_HEAD.pack(target.partition, target.base_sequence, len(target.batch_counts))
        out += struct.pack(f">{len(target.batch_counts)}I", *target.batch_counts)
        offsets = array("q", target.offsets)
        offsets.byteswap()  # big-endian on the wire whatever the machine's order
        out += offsets.tobytes()
    return bytes(out)


def decode_move(value: bytes) -> MoveIntent:
    try:
        version, pid, epoch, count = _MOVE_HEAD.unpack_from(value, 0)
        if version != _VERSION:
            raise MarkerError(f"move intent version {version}")
        at = _MOVE_HEAD.size
        targets = []
        for _ in range(count):
            (length,) = _U16.unpack_from(value, at)
            topic = value[at + 2 : at + 2 + length].decode()
            at += 2 + length
            partition, base_sequence, batches = _TARGET_HEAD.unpack_from(value, at)
            at += _TARGET_HEAD.size
            counts = struct.unpack_from(f">{batches}I", value, at)
            at += 4 * batches
            offsets = _offsets(value, at, sum(counts))
            at += 8 * len(offsets)
            targets.append(TargetMove(topic, partition, base_sequence, counts, tuple(offsets)))
    except (struct.error, UnicodeDecodeError) as exc:
        raise MarkerError(f"a move intent that does not parse: {exc}") from None
    if at != len(value):
        raise MarkerError(f"a move intent with {len(value) - at} bytes left over")
    return MoveIntent(pid, epoch, tuple(targets))


def encode_cancel(offsets: Sequence[int]) -> bytes:
    data = array("q", offsets)
    data.byteswap()
    return _COUNT.pack(_VERSION, len(offsets)) + data.tobytes()


def decode_cancel(value: bytes) -> list[int]:
    try:
        version, count = _COUNT.unpack_from(value, 0)
    except struct.error as exc:
        raise MarkerError(f"a cancellation that does not parse: {exc}") from None
    if version != _VERSION or len(value) != _COUNT.size + 8 * count:
        raise MarkerError(f"a cancellation of version {version} and {len(value)} bytes")
    return list(_offsets(value, _COUNT.size, count))


@dataclass(frozen=True, slots=True)
class Requeued:
    offset: int
    due: int
    id_offset: int


def encode_requeue(entries: Sequence[Requeued]) -> bytes:
    data = array("q", [n for e in entries for n in (e.offset, e.due, e.id_offset)])
    data.byteswap()
    return _COUNT.pack(_VERSION, len(entries)) + data.tobytes()


def decode_requeue(value: bytes) -> list[Requeued]:
    try:
        version, count = _COUNT.unpack_from(value, 0)
    except struct.error as exc:
        raise MarkerError(f"a requeue that does not parse: {exc}") from None
    if version != _VERSION or len(value) != _COUNT.size + 24 * count:
        raise MarkerError(f"a requeue of version {version} and {len(value)} bytes")
    numbers = _offsets(value, _COUNT.size, 3 * count)
    return [Requeued(*numbers[i : i + 3]) for i in range(0, len(numbers), 3)]


def _offsets(value: bytes, at: int, count: int) -> array[int]:
    if at + 8 * count > len(value):
        raise MarkerError("a marker shorter than its offsets")
    offsets = array("q", value[at : at + 8 * count])
    offsets.byteswap()
    return offsets


def marker_batch(kind: bytes, value: bytes, timestamp_ms: int) -> bytes:
    """A batch holding one marker record of ``kind`` (``MOVE``, ``REQUEUE``, ``CANCEL``)."""
    builder = BatchBuilder()
    builder.append(value, timestamp=timestamp_ms, headers=[(DELAY_MARKER, kind)])
    return builder.build()


def marker_kind(record: Record) -> bytes | None:
    """The marker kind of a record of a timer partition (None: a scheduled record)."""
    for key, value in record.headers:
        if key == DELAY_MARKER:
            return value or b""
    return None
