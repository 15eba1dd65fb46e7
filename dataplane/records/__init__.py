"""The record codec: Kafka RecordBatch v2, the one format storage, broker and SDK share.

One home for the format every part rides on (lanes, mirror provenance, control batches
of transactions, Spark and Databus read and write it too):

- ``layout``: the byte table (the specification), field offsets, structs, value types;
- ``varint``: zigzag LEB128, one encoding table and one decoding table;
- ``compression``: the record-block codecs, framed as Kafka frames them, bounded;
- ``header``: reading, checking and stamping the 61-byte batch header;
- ``builder``: encoding records and batches;
- ``copying``: copying a fetched batch's records into a batch being built, with mirror
  provenance headers, no object per record;
- ``decoder``: decoding records, eagerly (``Record``) or lazily for a consumer, with a
  fast path for dense batches;
- ``columns``: decoding batches into columns in Arrow's buffer layout, no object per
  record (Spark reads topics this way);
- ``validation``: every record of a client's batch checked before a leader stores it;
- ``errors``: the ``CorruptBatchError`` family, one class per failure mode.

It imports nothing else of Meridian: storage, broker and SDK build on it. This package
re-exports each module's public names; importing a module directly works as well.
"""

from __future__ import annotations

from dataplane.records.builder import (
    BatchBuilder,
    HeadersLike,
    RecordLike,
    as_bytes,
    build_batch,
    encode_batch,
    encode_headers,
    encode_record,
)
from dataplane.records.columns import (
    BinaryColumn,
    Columns,
    decode_columns,
)
from dataplane.records.compression import (
    DECOMPRESSION_ERRORS,
    Compression,
    DecompressionLimitError,
    compress,
    decompress,
)
from dataplane.records.copying import copy_records
from dataplane.records.decoder import (
    FetchedBatch,
    LazyHeaders,
    decode_batch,
    decode_batches,
    decode_lazy,
    first_offset_at_or_after,
    records_bytes,
)
from dataplane.records.errors import (
    BatchLengthError,
    CorruptBatchError,
    CrcMismatchError,
    InvalidMagicError,
    InvalidRecordCountError,
    InvalidTimestampError,
    MalformedRecordError,
    MaxTimestampError,
    OffsetDeltaError,
    OversizeBatchError,
    RecordCountMismatchError,
    RecordError,
    TruncatedRecordError,
    UncompressedSizeError,
    UnsupportedCodecError,
)
from dataplane.records.header import (
    BatchHeader,
    iter_batches,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from dataplane.records.layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_COVERED_STRUCT,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MAX_UNCOMPRESSED_BYTES,
    MIN_BATCH_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PARTITION_LEADER_EPOCH_OFFSET,
    PREFIX_STRUCT,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_COUNT_OFFSET,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Bytes,
    Header,
    ReadableBuffer,
    Record,
    TimestampType,
    WritableBuffer,
)
from dataplane.records.validation import (
    validate_records,
)
from dataplane.records.varint import (
    NULL_VARINT,
    VARINT_TABLE_SIZE,
    VARINTS,
    varint,
)

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "COMPRESSION_MASK",
    "CONTROL_MASK",
    "CRC_COVERED_STRUCT",
    "CRC_OFFSET",
    "DECOMPRESSION_ERRORS",
    "DELETE_HORIZON_MASK",
    "HEADER_SIZE",
    "HEADER_STRUCT",
    "LAST_OFFSET_DELTA_OFFSET",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "MAX_UNCOMPRESSED_BYTES",
    "MIN_BATCH_LENGTH",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NULL_VARINT",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PREFIX_STRUCT",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_OFFSET",
    "RECORD_COUNT_OFFSET",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "VARINTS",
    "VARINT_TABLE_SIZE",
    "BatchBuilder",
    "BatchHeader",
    "BatchLengthError",
    "BinaryColumn",
    "Bytes",
    "Columns",
    "Compression",
    "CorruptBatchError",
    "CrcMismatchError",
    "DecompressionLimitError",
    "FetchedBatch",
    "Header",
    "HeadersLike",
    "InvalidMagicError",
    "InvalidRecordCountError",
    "InvalidTimestampError",
    "LazyHeaders",
    "MalformedRecordError",
    "MaxTimestampError",
    "OffsetDeltaError",
    "OversizeBatchError",
    "ReadableBuffer",
    "Record",
    "RecordCountMismatchError",
    "RecordError",
    "RecordLike",
    "TimestampType",
    "TruncatedRecordError",
    "UncompressedSizeError",
    "UnsupportedCodecError",
    "WritableBuffer",
    "as_bytes",
    "build_batch",
    "compress",
    "copy_records",
    "decode_batch",
    "decode_batches",
    "decode_columns",
    "decode_lazy",
    "decompress",
    "encode_batch",
    "encode_headers",
    "encode_record",
    "first_offset_at_or_after",
    "iter_batches",
    "read_header",
    "records_bytes",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "validate_batch",
    "validate_records",
    "varint",
]
