"""The 61-byte header of a RecordBatch v2: reading it, checking a batch, stamping it.

The layout is ``layout``'s. ``validate_batch`` proves a batch arrived as its sender
built it (length, magic, CRC-32C, codec, record count against offset delta) without
touching its records; ``validation.validate_records`` checks the records themselves.
The broker assigns the base offset and leader epoch in place (``set_*``): both lie
outside the CRC, so the sender's CRC stays valid.

Thread safety: functions are pure over their arguments, except the ``set_*`` functions,
which write into the caller's buffer.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from crc32c import crc32c

from dataplane.records.compression import Compression
from dataplane.records.errors import (
    BatchLengthError,
    CorruptBatchError,
    CrcMismatchError,
    InvalidMagicError,
    InvalidRecordCountError,
    OversizeBatchError,
    UnsupportedCodecError,
)
from dataplane.records.layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    NO_SEQUENCE,
    PARTITION_LEADER_EPOCH_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    ReadableBuffer,
    TimestampType,
    WritableBuffer,
)

_INT32_MAX: Final = 2**31 - 1
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT64: Final = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61 header bytes of a batch, field for field (see ``layout``)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        """The codec; raises ``UnsupportedCodecError`` for bits 5-7."""
        codec = self.attributes & COMPRESSION_MASK
        if codec > Compression.ZSTD:
            raise UnsupportedCodecError(codec, offset=self.base_offset)
        return Compression(codec)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """Set by compaction; ``base_timestamp`` then holds the delete horizon."""
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap from 2**31 - 1 to 0 as in Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        if self.base_sequence > _INT32_MAX - self.last_offset_delta:
            return self.base_sequence + self.last_offset_delta - _INT32_MAX - 1
        return self.base_sequence + self.last_offset_delta


def _unfrozen_twin(cls: type) -> Any:
    """A mutable dataclass with ``cls``'s exact slot layout.

    A frozen dataclass's ``__init__`` costs about 0.25 us per field (it goes through
    ``object.__setattr__``); the hot decode paths build the twin and assign
    ``__class__ = cls``, which the identical layout allows, at a third of the cost.
    """
    names = [field.name for field in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(
        f"_{cls.__name__}Twin", names, slots=True, eq=False, repr=False, match_args=False
    )


_BatchHeaderTwin: Final = _unfrozen_twin(BatchHeader)


# --- header access ---------------------------------------------------------------------


def read_header(buf: ReadableBuffer, position: int = 0) -> BatchHeader:
    """Parse the 61 header bytes at ``position``; no CRC or consistency check.

    Raises ``BatchLengthError`` when fewer than ``HEADER_SIZE`` bytes remain (its
    ``declared`` is the batch size from the length field, or ``HEADER_SIZE`` when even
    that is cut off), or ``InvalidMagicError`` when a short buffer holds another magic.
    """
    if position < 0:
        raise ValueError(f"negative position {position}")
    try:
        fields = HEADER_STRUCT.unpack_from(buf, position)
    except struct.error:
        raise _short_header_error(buf, position) from None
    header: BatchHeader = _BatchHeaderTwin(*fields)
    header.__class__ = BatchHeader
    return header


def _short_header_error(buf: ReadableBuffer, position: int) -> CorruptBatchError:
    available = max(0, len(buf) - position)
    offset = _INT64.unpack_from(buf, position)[0] if available >= LOG_OVERHEAD else None
    if available > MAGIC_OFFSET and buf[position + MAGIC_OFFSET] != MAGIC:
        return InvalidMagicError(buf[position + MAGIC_OFFSET], position=position, offset=offset)
    declared = HEADER_SIZE
    if offset is not None:
        declared = _INT32.unpack_from(buf, position + LENGTH_OFFSET)[0] + LOG_OVERHEAD
    return BatchLengthError(declared, available, position=position, offset=offset)


def validate_batch(
    buf: ReadableBuffer, position: int = 0, *, max_batch_bytes: int | None = None
) -> BatchHeader:
    """Check the batch at ``position`` without decoding its records; return its header.

    Checks, in order: a whole header is present and the batch length is at least
    ``MIN_BATCH_LENGTH`` and fits the buffer (``BatchLengthError``); magic is 2
    (``InvalidMagicError``); the size is at most ``max_batch_bytes``
    (``OversizeBatchError``); the CRC-32C of bytes [position + 21, position + size) equals
    the stored one (``CrcMismatchError``); the codec is 0-4 (``UnsupportedCodecError``);
    ``record_count >= 1`` and ``last_offset_delta >= record_count - 1``
    (``InvalidRecordCountError``). The CRC comes before the fields it covers so that any
    damaged byte reads as a CRC mismatch, and an unknown codec means a sender's choice.
    Every error carries ``position`` and, once readable, ``offset`` (the base offset).
    """
    if position >= 0:
        header = valid_header_or_none(buf, position, max_batch_bytes)
        if header is not None:
            return header
    header = check_structure(buf, position, max_batch_bytes)  # find out what is wrong
    check_crc(buf, position, header)
    check_fields(header, position)
    return header


def valid_header_or_none(
    buf: ReadableBuffer, position: int, max_batch_bytes: int | None
) -> BatchHeader | None:
    """Every check of ``validate_batch`` in one expression: the produce hot path.

    None means some check failed; the caller then runs them one by one for the error.
    """
    fields = valid_fields_or_none(buf, position, max_batch_bytes)
    if fields is None:
        return None
    header: BatchHeader = _BatchHeaderTwin(*fields)
    header.__class__ = BatchHeader
    return header


def valid_fields_or_none(
    buf: ReadableBuffer, position: int, max_batch_bytes: int | None, *, crc: bool = True
) -> tuple[int, ...] | None:
    """``valid_header_or_none``'s checks (the CRC only with ``crc``), the header's
    fields as ``HEADER_STRUCT`` unpacks them: for loops that need no ``BatchHeader``."""
    try:
        fields: tuple[int, ...] = HEADER_STRUCT.unpack_from(buf, position)
    except struct.error:
        return None
    length, count = fields[1], fields[12]
    end = position + length + LOG_OVERHEAD
    if not (
        fields[3] == MAGIC
        and length >= MIN_BATCH_LENGTH
        and end <= len(buf)
        and (max_batch_bytes is None or end - position <= max_batch_bytes)
        and fields[5] & COMPRESSION_MASK <= Compression.ZSTD
        and count >= 1
        and fields[6] >= count - 1
    ):
        return None
    if crc:
        with memoryview(buf) as view:
            if crc32c(view[position + ATTRIBUTES_OFFSET : end]) != fields[4]:
                return None
    return fields


def check_structure(buf: ReadableBuffer, position: int, max_batch_bytes: int | None) -> BatchHeader:
    header = read_header(buf, position)
    check_whole(buf, position, header)
    if header.magic != MAGIC:
        raise InvalidMagicError(header.magic, position=position, offset=header.base_offset)
    if max_batch_bytes is not None and header.size > max_batch_bytes:
        raise OversizeBatchError(
            header.size, max_batch_bytes, position=position, offset=header.base_offset
        )
    return header


def check_whole(buf: ReadableBuffer, position: int, header: BatchHeader) -> None:
    available = len(buf) - position
    if header.batch_length < MIN_BATCH_LENGTH or header.size > available:
        raise BatchLengthError(header.size, available, position=position, offset=header.base_offset)


def check_crc(buf: ReadableBuffer, position: int, header: BatchHeader) -> None:
    with memoryview(buf) as view:
        computed = crc32c(view[position + ATTRIBUTES_OFFSET : position + header.size])
    if computed != header.crc:
        raise CrcMismatchError(header.crc, computed, position=position, offset=header.base_offset)


def check_fields(header: BatchHeader, position: int) -> None:
    codec = header.attributes & COMPRESSION_MASK
    if codec > Compression.ZSTD:
        raise UnsupportedCodecError(codec, position=position, offset=header.base_offset)
    count, delta = header.record_count, header.last_offset_delta
    if count < 1 or delta < count - 1:
        raise InvalidRecordCountError(
            f"record count {count} does not fit last offset delta {delta}",
            position=position,
            offset=header.base_offset,
        )


def iter_batches(
    buf: ReadableBuffer, position: int = 0, *, validate: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each consecutive batch from ``position`` to the end.

    With ``validate`` every batch goes through ``validate_batch``; without, only its
    header is read and its length checked against the buffer. A partial or bad batch
    raises (a torn tail is a ``BatchLengthError``) after the good ones before it.
    """
    end = len(buf)
    while position < end:
        if validate:
            header = validate_batch(buf, position)
        else:
            header = read_header(buf, position)
            check_whole(buf, position, header)
        yield position, header
        position += header.size


# --- in-place updates by the broker ----------------------------------------------------


def set_base_offset(buf: WritableBuffer, position: int, base_offset: int) -> None:
    """Assign the base offset; the field is outside the CRC, which stays valid."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: WritableBuffer, position: int, epoch: int) -> None:
    """Stamp the leader epoch; the field is outside the CRC, which stays valid."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: WritableBuffer, position: int, timestamp_ms: int) -> None:
    """Mark the batch log-append-time with ``timestamp_ms`` as max timestamp; fix the CRC.

    Readers then report ``timestamp_ms`` for every record, as Kafka does for topics with
    ``message.timestamp.type=LogAppendTime``. Requires the whole batch in ``buf``.
    """
    header = read_header(buf, position)
    check_whole(buf, position, header)
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    with memoryview(buf) as view:
        crc = crc32c(view[position + ATTRIBUTES_OFFSET : position + header.size])
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)
