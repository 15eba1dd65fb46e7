"""How the broker turns failures into wire errors: one table, one abort helper.

``STORAGE_ERRORS`` maps every storage exception to its ``ErrorCode``; ``to_error`` applies
it (a ``MeridianError`` passes through). A request-level failure goes through ``abort``,
which ends the call with the status of ``dataplane.errors.GRPC_STATUS`` and the code's
name in the ``meridian-error`` trailing metadata; per-partition failures travel in results.
"""

from __future__ import annotations

import logging
from typing import NoReturn

import grpc

from dataplane.errors import ERROR_METADATA_KEY, ErrorCode, MeridianError
from dataplane.records.errors import (
    CorruptBatchError,
    InvalidRecordCountError,
    InvalidTimestampError,
    MalformedRecordError,
    MaxTimestampError,
    OversizeBatchError,
    UncompressedSizeError,
    UnsupportedCodecError,
)
from dataplane.storage.errors import (
    AppendTruncatedError,
    InvalidConfigError,
    InvalidOffsetError,
    LogClosedError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    StorageError,
)
from dataplane.tiered.errors import RemoteSegmentCorruptError, RemoteSegmentMissingError
from dataplane.tiered.layout import ManifestError
from dataplane.tiered.store import RemoteObjectMissingError, RemoteStoreUnavailableError

log = logging.getLogger(__name__)

# Most specific first: the first class an exception is an instance of decides.
STORAGE_ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (OversizeBatchError, ErrorCode.MESSAGE_TOO_LARGE),
    (UncompressedSizeError, ErrorCode.MESSAGE_TOO_LARGE),
    (UnsupportedCodecError, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    # Well-formed records the log does not accept: a count, offsets or timestamps that
    # disagree with the records (Kafka's INVALID_RECORD).
    (InvalidRecordCountError, ErrorCode.INVALID_RECORD),
    (InvalidTimestampError, ErrorCode.INVALID_RECORD),
    (MaxTimestampError, ErrorCode.INVALID_RECORD),
    # Bytes that do not parse as records: lengths, varints or headers that lie.
    (MalformedRecordError, ErrorCode.CORRUPT_MESSAGE),
    (CorruptBatchError, ErrorCode.CORRUPT_MESSAGE),
    (InvalidOffsetError, ErrorCode.INVALID_RECORD),
    (OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
    (LogDirOfflineError, ErrorCode.STORAGE_ERROR),
    # A closed log is being deleted or the broker is stopping: ask again elsewhere/later.
    (LogClosedError, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (AppendTruncatedError, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (InvalidConfigError, ErrorCode.INVALID_CONFIG),
    (StorageError, ErrorCode.STORAGE_ERROR),
    # Tiered storage: the store did not answer (retry), or lost or damaged what it holds.
    (RemoteStoreUnavailableError, ErrorCode.REMOTE_STORAGE_NOT_AVAILABLE),
    (RemoteSegmentMissingError, ErrorCode.REMOTE_SEGMENT_MISSING),
    (RemoteSegmentCorruptError, ErrorCode.REMOTE_SEGMENT_CORRUPT),
    (RemoteObjectMissingError, ErrorCode.REMOTE_SEGMENT_MISSING),
    (ManifestError, ErrorCode.REMOTE_SEGMENT_CORRUPT),
)


def to_error(exc: BaseException) -> MeridianError:
    """The ``MeridianError`` for ``exc``; anything unexpected is logged as a server error."""
    if isinstance(exc, MeridianError):
        return exc
    for kind, code in STORAGE_ERRORS:
        if isinstance(exc, kind):
            return MeridianError(code, str(exc))
    log.error("unexpected error", exc_info=exc)
    return MeridianError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


def trailing_metadata(error: MeridianError) -> tuple[tuple[str, str], ...]:
    return ((ERROR_METADATA_KEY, error.code_name),)


async def abort(context: grpc.aio.ServicerContext, error: MeridianError) -> NoReturn:
    """End the call with ``error``: its gRPC status, message and trailing code name."""
    await context.abort(error.grpc_status, error.message, trailing_metadata(error))
    raise AssertionError("context.abort returned")  # abort always raises


def invalid(message: str, code: int = ErrorCode.INVALID_REQUEST) -> MeridianError:
    return MeridianError(code, message)
