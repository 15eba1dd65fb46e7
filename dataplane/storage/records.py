"""Kafka RecordBatch v2 (magic 2): the bytes Meridian stores, replicates and serves.

Bit for bit Apache Kafka's ``DefaultRecordBatch`` (DESIGN.md decision 1): an independent
implementation (kafka-python's record codec) reads what this module writes, and this
module reads what it writes.

Batch layout, big-endian, offsets relative to the start of the batch::

    @0   int64   baseOffset            assigned by the broker; outside the CRC
    @8   int32   batchLength           bytes after this field = batch size - LOG_OVERHEAD
    @12  int32   partitionLeaderEpoch  assigned by the broker; outside the CRC
    @16  int8    magic                 2
    @17  uint32  crc                   CRC-32C (Castagnoli) of bytes [@21, end of batch)
    @21  int16   attributes            bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4,
                                       4 zstd), bit 3 timestamp type (1 = log append
                                       time), bit 4 transactional, bit 5 control,
                                       bit 6 delete horizon set
    @23  int32   lastOffsetDelta
    @27  int64   baseTimestamp
    @35  int64   maxTimestamp
    @43  int64   producerId            -1 = none
    @51  int16   producerEpoch         -1 = none
    @53  int32   baseSequence          -1 = none
    @57  int32   recordCount
    @61  ...     records               one compressed block when the codec is not none

Record layout; every varint is zigzag-encoded LEB128 (protobuf ``sint32``/``sint64``)::

    length varint (bytes after it) | attributes int8 (0) | timestampDelta varlong
    | offsetDelta varint | keyLength varint (-1 = null) | key
    | valueLength varint (-1 = null) | value | headerCount varint | headers
    header: keyLength varint | key (UTF-8) | valueLength varint (-1 = null) | value

Compressed records: gzip is an RFC 1952 stream; snappy is xerial framing (the magic
``82 'SNAPPY' 00``, version 1 and compat 1 as int32, then blocks of an int32 length and a
raw snappy block of at most 32 KiB of input; a plain raw snappy block is also read, as
Kafka and kafka-python do); lz4 is one LZ4 frame of independent 64 KiB blocks; zstd is
one or more zstd frames. Decompression is bounded by ``max_uncompressed_bytes``.

Thread safety: functions are pure over their arguments, except the ``set_*`` functions,
which write into the caller's buffer. A ``BatchBuilder`` belongs to one thread.
"""

from __future__ import annotations

import dataclasses
import enum
import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, TypeAlias

from crc32c import crc32c

from dataplane.storage.compression import (
    DECOMPRESSION_ERRORS,
    DecompressionLimitError,
    decompress,
)
from dataplane.storage.compression import Compression as Compression  # re-exported
from dataplane.storage.errors import (
    BatchLengthError,
    CorruptBatchError,
    CrcMismatchError,
    InvalidMagicError,
    InvalidRecordCountError,
    OversizeBatchError,
    TruncatedRecordError,
    UncompressedSizeError,
    UnsupportedCodecError,
)

ReadableBuffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
WritableBuffer: TypeAlias = bytearray | memoryview | mmap.mmap
Bytes: TypeAlias = bytes | bytearray | memoryview

BASE_OFFSET_OFFSET: Final = 0
LENGTH_OFFSET: Final = 8
PARTITION_LEADER_EPOCH_OFFSET: Final = 12
MAGIC_OFFSET: Final = 16
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21
LAST_OFFSET_DELTA_OFFSET: Final = 23
BASE_TIMESTAMP_OFFSET: Final = 27
MAX_TIMESTAMP_OFFSET: Final = 35
PRODUCER_ID_OFFSET: Final = 43
PRODUCER_EPOCH_OFFSET: Final = 51
BASE_SEQUENCE_OFFSET: Final = 53
RECORD_COUNT_OFFSET: Final = 57
RECORDS_OFFSET: Final = 61
HEADER_SIZE: Final = 61
LOG_OVERHEAD: Final = 12
MIN_BATCH_LENGTH: Final = HEADER_SIZE - LOG_OVERHEAD

MAGIC: Final = 2
COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_MASK: Final = 0x10
CONTROL_MASK: Final = 0x20
DELETE_HORIZON_MASK: Final = 0x40

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
MAX_UNCOMPRESSED_BYTES: Final = 64 * 1024 * 1024
"""Default bound on one batch's decompressed records; a larger claim is a bomb."""

_INT32_MAX: Final = 2**31 - 1

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
PREFIX_STRUCT: Final = struct.Struct(">qiibI")  # header fields outside the CRC
CRC_COVERED_STRUCT: Final = struct.Struct(">hiqqqhii")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT64: Final = struct.Struct(">q")


class TimestampType(enum.IntEnum):
    """Attribute bit 3: who set the timestamps, the producer or the broker."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class Header(NamedTuple):
    """One record header; ``value`` None is a null value (-1 length on the wire).

    Immutable, compared and hashed by value. A named tuple, so decoding builds one
    in a single C call.
    """

    key: str
    value: bytes | None


class Record(NamedTuple):
    """One decoded record, with its absolute offset and timestamp (epoch ms).

    Immutable, compared and hashed by value. A named tuple, so decoding builds one
    in a single C call (a consumer decodes millions per second).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61 header bytes of a batch, field for field (see the module docstring)."""

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
        fields = _HEADER.unpack_from(buf, position)
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
        header = _valid_header_or_none(buf, position, max_batch_bytes)
        if header is not None:
            return header
    header = _check_structure(buf, position, max_batch_bytes)  # find out what is wrong
    _check_crc(buf, position, header)
    _check_fields(header, position)
    return header


def _valid_header_or_none(
    buf: ReadableBuffer, position: int, max_batch_bytes: int | None
) -> BatchHeader | None:
    """Every check of ``validate_batch`` in one expression: the produce hot path.

    None means some check failed; the caller then runs them one by one for the error.
    """
    try:
        fields = _HEADER.unpack_from(buf, position)
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
    with memoryview(buf) as view:
        if crc32c(view[position + ATTRIBUTES_OFFSET : end]) != fields[4]:
            return None
    header: BatchHeader = _BatchHeaderTwin(*fields)
    header.__class__ = BatchHeader
    return header


def _check_structure(
    buf: ReadableBuffer, position: int, max_batch_bytes: int | None
) -> BatchHeader:
    header = read_header(buf, position)
    _check_whole(buf, position, header)
    if header.magic != MAGIC:
        raise InvalidMagicError(header.magic, position=position, offset=header.base_offset)
    if max_batch_bytes is not None and header.size > max_batch_bytes:
        raise OversizeBatchError(
            header.size, max_batch_bytes, position=position, offset=header.base_offset
        )
    return header


def _check_whole(buf: ReadableBuffer, position: int, header: BatchHeader) -> None:
    available = len(buf) - position
    if header.batch_length < MIN_BATCH_LENGTH or header.size > available:
        raise BatchLengthError(header.size, available, position=position, offset=header.base_offset)


def _check_crc(buf: ReadableBuffer, position: int, header: BatchHeader) -> None:
    with memoryview(buf) as view:
        computed = crc32c(view[position + ATTRIBUTES_OFFSET : position + header.size])
    if computed != header.crc:
        raise CrcMismatchError(header.crc, computed, position=position, offset=header.base_offset)


def _check_fields(header: BatchHeader, position: int) -> None:
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
            _check_whole(buf, position, header)
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
    _check_whole(buf, position, header)
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    with memoryview(buf) as view:
        crc = crc32c(view[position + ATTRIBUTES_OFFSET : position + header.size])
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)


# --- decoding --------------------------------------------------------------------------


def decode_batch(
    buf: ReadableBuffer,
    position: int = 0,
    *,
    verify_crc: bool = True,
    max_uncompressed_bytes: int = MAX_UNCOMPRESSED_BYTES,
) -> tuple[BatchHeader, list[Record]]:
    """Validate, decompress and decode the batch at ``position``.

    Raises what ``validate_batch`` raises (the CRC check only with ``verify_crc``);
    ``CorruptBatchError`` when the records do not decompress, ``UncompressedSizeError``
    when they would exceed ``max_uncompressed_bytes``; ``TruncatedRecordError`` when a
    record overruns its declared length or the batch, has a negative length other than
    -1, a varint longer than 10 bytes, a header key that is not UTF-8, or bytes trail
    the last record;
    ``InvalidRecordCountError`` when the number of records differs from the header's.

    ``Record.offset`` is base offset + offset delta; ``Record.timestamp`` is base
    timestamp + delta, or the max timestamp for every record of a log-append-time batch.
    """
    header = _check_structure(buf, position, None)
    if verify_crc:
        _check_crc(buf, position, header)
    _check_fields(header, position)
    data = records_bytes(buf, position, header, max_uncompressed_bytes)
    records: list[Record] = []
    _decode_into(records, data, position, header, {})
    return header, records


def decode_batches(buf: ReadableBuffer) -> list[Record]:
    """All records of all the consecutive batches in ``buf``, in order.

    Each batch is checked as ``decode_batch`` checks it (CRC included) and raises the
    same errors.
    """
    records: list[Record] = []
    header_sets: dict[bytes, tuple[Header, ...]] = {}
    position, end = 0, len(buf)
    while position < end:
        header = _valid_header_or_none(buf, position, None)
        if header is None:  # find out what is wrong, and say it
            records += decode_batch(buf, position)[1]
            header = read_header(buf, position)
        else:
            data = records_bytes(buf, position, header, MAX_UNCOMPRESSED_BYTES)
            _decode_into(records, data, position, header, header_sets)
        position += header.batch_length + LOG_OVERHEAD
    return records


def _decode_into(
    out: list[Record],
    data: bytes,
    position: int,
    header: BatchHeader,
    header_sets: dict[bytes, tuple[Header, ...]],
) -> None:
    """Append the batch's records (decompressed in ``data``) to ``out``, or raise."""
    first = len(out)
    try:
        _decode_records(data, header.base_offset, header.base_timestamp, out, header_sets)
    except ValueError as err:
        del out[first:]
        raise TruncatedRecordError(str(err), position=position, offset=header.base_offset) from None
    count = len(out) - first
    if count != header.record_count:
        del out[first:]
        raise InvalidRecordCountError(
            f"header declares {header.record_count} records, {count} present",
            position=position,
            offset=header.base_offset,
        )
    if header.attributes & TIMESTAMP_TYPE_MASK:  # log-append time: one time for all
        stamp = header.max_timestamp
        out[first:] = [r._replace(timestamp=stamp) for r in out[first:]]


def first_offset_at_or_after(
    buf: ReadableBuffer, position: int, timestamp: int, min_offset: int = 0
) -> int | None:
    """Offset of the batch's first record with timestamp >= ``timestamp`` and offset >=
    ``min_offset``, or None; the batch must have been validated already.

    Reads only each record's length, timestamp delta and offset delta (no key, value or
    header is touched): timestamp lookups scan a whole batch for one answer.
    """
    header = read_header(buf, position)
    base_offset = header.base_offset
    if header.attributes & TIMESTAMP_TYPE_MASK:  # log-append time: one time for all
        first = max(base_offset, min_offset)
        found = header.max_timestamp >= timestamp and first <= header.last_offset
        return first if found else None
    data = records_bytes(buf, position, header, MAX_UNCOMPRESSED_BYTES)
    base_timestamp, slow = header.base_timestamp, _read_uvarint
    pos, end = 0, len(data)
    try:
        while pos < end:
            if (u := data[pos]) < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow(data, pos)
            stop = pos + ((u >> 1) ^ -(u & 1))
            if not pos + 6 <= stop <= end:  # also keeps the scan moving forward
                raise ValueError("a record overruns the batch or is too short")
            if (u := data[pos + 1]) < 0x80:  # data[pos] is the record attributes byte
                at = pos + 2
            elif (b := data[pos + 2]) < 0x80:
                u, at = u - 0x80 + (b << 7), pos + 3
            else:
                u, at = slow(data, pos + 1)
            if base_timestamp + ((u >> 1) ^ -(u & 1)) >= timestamp:
                delta, _ = slow(data, at)
                delta = (delta >> 1) ^ -(delta & 1)
                if not 0 <= delta <= header.last_offset_delta:
                    raise ValueError(f"offset delta {delta} is outside the batch")
                if base_offset + delta >= min_offset:
                    return base_offset + delta
            pos = stop
    except (IndexError, ValueError) as err:
        raise TruncatedRecordError(str(err), position=position, offset=base_offset) from None
    return None


def records_bytes(buf: ReadableBuffer, position: int, header: BatchHeader, limit: int) -> bytes:
    """The records of the batch at ``position``, decompressed to at most ``limit`` bytes.

    Raises ``UncompressedSizeError`` past ``limit``, ``CorruptBatchError`` when the
    records do not decompress.
    """
    with memoryview(buf) as view:
        payload = view[position + RECORDS_OFFSET : position + header.size]
        if not header.attributes & COMPRESSION_MASK:
            return bytes(payload)
        codec = header.compression
        try:
            return decompress(codec, payload, limit)
        except DecompressionLimitError as err:
            raise UncompressedSizeError(
                codec.name.lower(), err.limit, position=position, offset=header.base_offset
            ) from None
        except DECOMPRESSION_ERRORS as err:
            raise CorruptBatchError(
                f"cannot decompress {codec.name.lower()} records: {err}",
                position=position,
                offset=header.base_offset,
            ) from None


ZIGZAG: Final = tuple((u >> 1) ^ -(u & 1) for u in range(1 << 14))
"""Zigzag decoding of every one- and two-byte varint value (index: the raw value)."""
_HEADER_SETS_KEPT: Final = 256


def _decode_records(
    data: bytes,
    base_offset: int,
    base_timestamp: int,
    out: list[Record],
    header_sets: dict[bytes, tuple[Header, ...]],
) -> None:
    """Append every record in ``data`` to ``out``; raise ``ValueError`` naming the first
    bad one (``out`` then holds the records before it).

    This loop bounds consumer throughput, so it is written for the interpreter: one
    pass, every varint read inline (its one- and two-byte forms without a call, the
    rare longer ones in ``_read_uvarint``), signed values through a lookup table,
    lengths (zigzag-even when valid) by a shift, and each record built in one C call
    (``tuple.__new__``). Records often carry the same headers (a lane, a content type):
    ``header_sets`` maps the raw bytes of a record's headers, once decoded, to their
    (immutable, hence shareable) tuple, so repeated ones are not decoded again.
    """
    zigzag, slow, new, add, cls = ZIGZAG, _read_uvarint, tuple.__new__, out.append, Record
    pos, end, first = 0, len(data), len(out)
    try:
        while pos < end:
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow(data, pos)
            stop = pos + (u >> 1)
            if stop > end or u & 1:  # a record too short for its fields is caught at its end
                raise ValueError(f"record {len(out) - first} overruns the batch or is too short")
            # data[pos] holds the record attributes, which Kafka defines none of.
            u = data[pos + 1]
            if u < 0x80:
                timestamp = base_timestamp + zigzag[u]
                pos += 2
            elif (b := data[pos + 2]) < 0x80:
                timestamp = base_timestamp + zigzag[u - 0x80 + (b << 7)]
                pos += 3
            else:
                u, pos = slow(data, pos + 1)
                timestamp = base_timestamp + ((u >> 1) ^ -(u & 1))
            u = data[pos]
            if u < 0x80:
                offset = base_offset + zigzag[u]
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                offset = base_offset + zigzag[u - 0x80 + (b << 7)]
                pos += 2
            else:
                u, pos = slow(data, pos)
                offset = base_offset + ((u >> 1) ^ -(u & 1))
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow(data, pos)
            if not u & 1:
                u >>= 1
                key: bytes | None = data[pos : pos + u]
                pos += u
            elif u == 1:
                key = None
            else:
                raise ValueError(f"record {len(out) - first} has key length {(u >> 1) ^ -1}")
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow(data, pos)
            if not u & 1:
                u >>= 1
                value: bytes | None = data[pos : pos + u]
                pos += u
            elif u == 1:
                value = None
            else:
                raise ValueError(f"record {len(out) - first} has value length {(u >> 1) ^ -1}")
            if data[pos] == 0:
                pos += 1
                headers: tuple[Header, ...] = ()
            elif (known := header_sets.get(raw := data[pos:stop])) is not None:
                headers, pos = known, stop  # the same bytes decoded fine before
            else:
                headers, pos = _read_headers(data, pos, stop)
                if pos == stop and len(header_sets) < _HEADER_SETS_KEPT:
                    header_sets[raw] = headers
            if pos != stop:
                raise ValueError(f"record {len(out) - first}'s fields do not fill its length")
            add(new(cls, (offset, timestamp, key, value, headers)))
    except IndexError:
        raise ValueError(f"record {len(out) - first} runs past the end of the batch") from None


def _read_headers(data: bytes, pos: int, stop: int) -> tuple[tuple[Header, ...], int]:
    """The headers at ``pos`` (their count first) and the position after them."""
    u = data[pos]
    if u < 0x80:
        pos += 1
    else:
        u, pos = _read_uvarint(data, pos)
    count = (u >> 1) ^ -(u & 1)
    if not 0 <= count <= (stop - pos) // 2:
        raise ValueError(f"invalid header count {count}")
    headers = []
    new, cls, keys = tuple.__new__, Header, _HEADER_KEYS
    for _ in range(count):
        u = data[pos]
        if u < 0x80:
            pos += 1
        else:
            u, pos = _read_uvarint(data, pos)
        if u & 1:
            raise ValueError("null header key" if u == 1 else f"invalid length {(u >> 1) ^ -1}")
        u >>= 1
        raw = data[pos : pos + u]
        pos += u
        key = keys.get(raw)
        if key is None:
            key = raw.decode()
            if len(keys) < _HEADER_KEYS_KEPT:
                keys[raw] = key
        u = data[pos]
        if u < 0x80:
            pos += 1
        else:
            u, pos = _read_uvarint(data, pos)
        if not u & 1:
            u >>= 1
            value: bytes | None = data[pos : pos + u]
            pos += u
        elif u == 1:
            value = None
        else:
            raise ValueError(f"invalid length {(u >> 1) ^ -1}")
        headers.append(new(cls, (key, value)))
    return tuple(headers), pos


_HEADER_KEYS: Final[dict[bytes, str]] = {}
"""Header keys decoded so far (a few names such as ``x-trace-id`` recur endlessly)."""
_HEADER_KEYS_KEPT: Final = 4096


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Zigzag LEB128 at ``pos``: ``(value, position after it)``; at most 10 bytes."""
    raw, pos = _read_uvarint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _read_uvarint(data: bytes | memoryview, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Unsigned LEB128 at ``pos``: ``(value, position after it)``."""
    result = 0
    for index in range(max_bytes):
        b = data[pos + index]
        result |= (b & 0x7F) << (7 * index)
        if b < 0x80:
            return result, pos + index + 1
    raise ValueError(f"varint longer than {max_bytes} bytes")
