"""Kafka RecordBatch v2 (magic 2): the bytes Meridian stores, replicates and serves.

Bit for bit Apache Kafka's ``DefaultRecordBatch`` (DESIGN.md decision 1): an independent
implementation (kafka-python's record codec) reads what ``dataplane.records`` writes,
and it reads what kafka-python writes. This module is the specification: the byte
table, the field offsets and structs, and the value types a decoded batch is made of.

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

Thread safety: everything here is immutable.
"""

from __future__ import annotations

import enum
import mmap
import struct
from typing import Final, NamedTuple, TypeAlias

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

HEADER_STRUCT: Final = struct.Struct(">qiibIhiqqqhii")  # the 61 header bytes, in order
PREFIX_STRUCT: Final = struct.Struct(">qiibI")  # header fields outside the CRC
CRC_COVERED_STRUCT: Final = struct.Struct(">hiqqqhii")


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
