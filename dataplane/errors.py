"""The data plane's typed errors, shared by the broker and the SDK.

``ErrorCode`` (``errors.proto``) is the wire vocabulary. Per-partition failures travel as
``error``/``error_message`` fields of a result; a failure of a whole request is a gRPC
status, chosen from ``GRPC_STATUS`` below, whose trailing metadata ``meridian-error``
carries the code's name. Codes below 100 are retriable, the rest are not.
"""

from __future__ import annotations

import grpc

from dataplane._gen.meridian.v1.errors_pb2 import ErrorCode

__all__ = [
    "ERROR_METADATA_KEY",
    "GRPC_STATUS",
    "ErrorCode",
    "MeridianError",
    "error_from_rpc",
    "is_retriable",
]

ERROR_METADATA_KEY = "meridian-error"
_CODE_NAMES = frozenset(ErrorCode.DESCRIPTOR.values_by_name)
_FIRST_FATAL = 100


def is_retriable(code: int) -> bool:
    return 0 < code < _FIRST_FATAL


# The gRPC status a request-level failure of each code is sent with.
GRPC_STATUS: dict[int, grpc.StatusCode] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: grpc.StatusCode.INTERNAL,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: grpc.StatusCode.NOT_FOUND,
    ErrorCode.REQUEST_TIMED_OUT: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.NOT_COORDINATOR: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.REBALANCE_IN_PROGRESS: grpc.StatusCode.ABORTED,
    ErrorCode.STORAGE_ERROR: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.BROKER_NOT_AVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.THROTTLED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.NOT_ENOUGH_REPLICAS: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.UNKNOWN_LEADER_EPOCH: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.LEADER_NOT_AVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.LANE_TOPIC_PENDING: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.HANDOVER_IN_PROGRESS: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.REMOTE_STORAGE_NOT_AVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.TIMER_LOG_PENDING: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.INVALID_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.CORRUPT_MESSAGE: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INVALID_RECORD: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.MESSAGE_TOO_LARGE: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.OFFSET_OUT_OF_RANGE: grpc.StatusCode.OUT_OF_RANGE,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INVALID_PRODUCER_EPOCH: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.UNKNOWN_PRODUCER_ID: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INVALID_TOPIC: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.TOPIC_ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.INVALID_CONFIG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INVALID_PARTITIONS: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.ILLEGAL_GENERATION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.UNKNOWN_MEMBER_ID: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INVALID_SESSION_TIMEOUT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INVALID_GROUP_ID: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.GROUP_ID_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.NON_EMPTY_GROUP: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INVALID_COMMIT_OFFSET: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INVALID_TIMESTAMP: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INVALID_REQUIRED_ACKS: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.POLICY_VIOLATION: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.STALE_CONTROLLER_EPOCH: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.QUOTA_EXCEEDED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.REASSIGNMENT_IN_PROGRESS: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.LANE_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.REMOTE_SEGMENT_MISSING: grpc.StatusCode.DATA_LOSS,
    ErrorCode.REMOTE_SEGMENT_CORRUPT: grpc.StatusCode.DATA_LOSS,
    ErrorCode.CONCURRENT_TRANSACTIONS: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.UNSTABLE_OFFSET_COMMIT: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.INVALID_TXN_STATE: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.PRODUCER_FENCED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.HALF_MESSAGE_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.INVALID_TRANSACTIONAL_ID: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.INVALID_DELAY: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.DELAYED_RECORD_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.DELAYED_RECORD_DELIVERED: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.DELAY_NOT_IDEMPOTENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.RETRY_POLICY_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
}


class MeridianError(Exception):
    """A typed data-plane failure: ``code`` (an ``ErrorCode``) and a message.

    The broker raises it to fail a request or a partition; the SDK raises it to the
    application. ``retriable`` says whether the same request may succeed later.
    """

    def __init__(self, code: int, message: str = "") -> None:
        self.code = int(code)
        self.message = message or ErrorCode.Name(self.code)  # type: ignore[arg-type]
        super().__init__(f"{self.code_name}: {self.message}")

    @property
    def code_name(self) -> str:
        return ErrorCode.Name(self.code)  # type: ignore[arg-type]

    @property
    def retriable(self) -> bool:
        return is_retriable(self.code)

    @property
    def grpc_status(self) -> grpc.StatusCode:
        return GRPC_STATUS.get(self.code, grpc.StatusCode.UNKNOWN)


# A gRPC failure without a Meridian code: transport problems are retriable.
_TRANSPORT: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.UNAVAILABLE: ErrorCode.BROKER_NOT_AVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: ErrorCode.REQUEST_TIMED_OUT,
    grpc.StatusCode.CANCELLED: ErrorCode.REQUEST_TIMED_OUT,
}


def error_from_rpc(exc: grpc.RpcError) -> MeridianError:
    """The ``MeridianError`` a failed call stands for (its trailing code, else transport)."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == ERROR_METADATA_KEY and isinstance(value, str) and value in _CODE_NAMES:
            return MeridianError(ErrorCode.Value(value), details or "")
    mapped = _TRANSPORT.get(code, ErrorCode.UNKNOWN_SERVER_ERROR) if code else None
    return MeridianError(mapped or ErrorCode.UNKNOWN_SERVER_ERROR, f"{code}: {details}")
