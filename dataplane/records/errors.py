"""Typed failures of the record codec: bytes that are not a valid RecordBatch v2.

One class per failure mode, each carrying the offending values (and where the batch
sits: ``position``, ``offset``) so a caller (the broker's error table, an operator
reading a log line, a consumer) can say exactly what went wrong.
"""

from __future__ import annotations


class RecordError(Exception):
    """Base class of every error raised by ``dataplane.records``."""


class CorruptBatchError(RecordError):
    """Bytes that should hold a RecordBatch v2 do not.

    ``position`` is the byte position of the batch in the buffer or segment it was read
    from, when known; ``offset`` its base offset, when it could be read.
    """

    def __init__(
        self, reason: str, *, position: int | None = None, offset: int | None = None
    ) -> None:
        where = []
        if offset is not None:
            where.append(f"base offset {offset}")
        if position is not None:
            where.append(f"position {position}")
        suffix = f" ({', '.join(where)})" if where else ""
        super().__init__(f"{reason}{suffix}")
        self.reason = reason
        self.position = position
        self.offset = offset


class InvalidMagicError(CorruptBatchError):
    """The magic byte is not 2."""

    def __init__(self, magic: int, **where: int | None) -> None:
        super().__init__(f"bad magic byte {magic}, expected 2", **where)
        self.magic = magic


class CrcMismatchError(CorruptBatchError):
    """The CRC-32C stored in the header does not match the bytes it covers."""

    def __init__(self, stored: int, computed: int, **where: int | None) -> None:
        super().__init__(f"bad CRC: stored 0x{stored:08x}, computed 0x{computed:08x}", **where)
        self.stored = stored
        self.computed = computed


class BatchLengthError(CorruptBatchError):
    """The batch length field disagrees with the bytes available or with itself."""

    def __init__(self, declared: int, available: int, **where: int | None) -> None:
        super().__init__(
            f"batch length mismatch: header declares {declared} bytes, {available} present",
            **where,
        )
        self.declared = declared
        self.available = available


class MalformedRecordError(CorruptBatchError):
    """A record inside the batch breaks the format: a length or varint out of bounds, a
    header count or length that does not fit, a header key that is not UTF-8, fields
    that do not fill the record's length, or bytes after the last record.

    ``record_index`` is the record's place in the batch (0 for the first), when known.
    """

    def __init__(
        self, reason: str, *, record_index: int | None = None, **where: int | None
    ) -> None:
        super().__init__(reason, **where)
        self.record_index = record_index


class TruncatedRecordError(MalformedRecordError):
    """A record inside the batch ends before its declared fields do (found reading)."""


class InvalidRecordCountError(CorruptBatchError):
    """The header's record count or offset delta disagrees with the records."""


class RecordCountMismatchError(InvalidRecordCountError):
    """The header declares another number of records than the batch holds."""

    def __init__(self, declared: int, present: int, **where: int | None) -> None:
        super().__init__(f"header declares {declared} records, {present} present", **where)
        self.declared = declared
        self.present = present


class OffsetDeltaError(InvalidRecordCountError):
    """Offset deltas are not 0, 1, 2, ... (required where the log assigns offsets).

    ``record_index`` is the record whose delta is out of order, or None when the
    header's last offset delta disagrees with the record count; ``delta`` the value
    found and ``expected`` the one required.
    """

    def __init__(
        self, record_index: int | None, delta: int, expected: int, **where: int | None
    ) -> None:
        what = "last offset delta" if record_index is None else f"record {record_index}'s"
        suffix = "" if record_index is None else " offset delta"
        super().__init__(
            f"{what}{suffix} is {delta}, expected {expected}: offset deltas must be dense",
            **where,
        )
        self.record_index = record_index
        self.delta = delta
        self.expected = expected


class InvalidTimestampError(CorruptBatchError):
    """A record's timestamp (base timestamp + delta) does not fit an int64."""

    def __init__(self, timestamp: int, **where: int | None) -> None:
        super().__init__(f"a record has timestamp {timestamp}, outside int64", **where)
        self.timestamp = timestamp


class MaxTimestampError(CorruptBatchError):
    """A create-time batch's max timestamp is not the largest of its records'."""

    def __init__(self, declared: int, computed: int, **where: int | None) -> None:
        super().__init__(
            f"header max timestamp {declared}, but the records' largest is {computed}", **where
        )
        self.declared = declared
        self.computed = computed


class UncompressedSizeError(CorruptBatchError):
    """Compressed records would decompress to more than the allowed bytes."""

    def __init__(self, codec: str, max_bytes: int, **where: int | None) -> None:
        super().__init__(f"{codec} records decompress to more than {max_bytes} bytes", **where)
        self.codec = codec
        self.max_bytes = max_bytes


class OversizeBatchError(CorruptBatchError):
    """A batch is larger than the configured maximum."""

    def __init__(self, size: int, max_bytes: int, **where: int | None) -> None:
        super().__init__(f"batch of {size} bytes exceeds the maximum of {max_bytes}", **where)
        self.size = size
        self.max_bytes = max_bytes


class UnsupportedCodecError(CorruptBatchError):
    """The compression bits name a codec that does not exist (5, 6 or 7)."""

    def __init__(self, codec: int, **where: int | None) -> None:
        super().__init__(f"unknown compression codec {codec}", **where)
        self.codec = codec
