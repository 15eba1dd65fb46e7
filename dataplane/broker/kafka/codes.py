"""Meridian's ``ErrorCode`` as Kafka's error codes: the one table of the Kafka listener.

Each code maps to the Kafka error a Kafka client's retry logic treats the same way: a
retriable Meridian failure becomes a code librdkafka and the Java client retry (after a
metadata refresh where Kafka would refresh), a permanent one a code they surface. Kafka's
codes come from kafka-python's ``kafka.errors`` (the registry of Kafka's error numbers),
never as bare numbers. ``HANDOVER_IN_PROGRESS`` (a lane partition another group of its
family still holds) is Kafka's ``UNSTABLE_OFFSET_COMMIT``, which clients answer by asking
again; a lane topic being created (``LANE_TOPIC_PENDING``) is ``LEADER_NOT_AVAILABLE``,
what Kafka answers for a topic it is creating.
"""

from __future__ import annotations

import kafka.errors as kafka_errors

from dataplane.errors import ErrorCode

NONE: int = kafka_errors.NoError.errno

# Kafka's error codes by name, for the listener's own answers.
UNKNOWN_SERVER_ERROR: int = kafka_errors.UnknownError.errno
CORRUPT_MESSAGE: int = kafka_errors.CorruptRecordError.errno
UNKNOWN_TOPIC_OR_PARTITION: int = kafka_errors.UnknownTopicOrPartitionError.errno
LEADER_NOT_AVAILABLE: int = kafka_errors.LeaderNotAvailableError.errno
NOT_LEADER_OR_FOLLOWER: int = kafka_errors.NotLeaderForPartitionError.errno
INVALID_REQUEST: int = kafka_errors.InvalidRequestError.errno
UNSUPPORTED_VERSION: int = kafka_errors.UnsupportedVersionError.errno
UNSUPPORTED_SASL_MECHANISM: int = kafka_errors.UnsupportedSaslMechanismError.errno
SASL_AUTHENTICATION_FAILED: int = kafka_errors.SaslAuthenticationFailedError.errno
POLICY_VIOLATION: int = kafka_errors.PolicyViolationError.errno
FENCED_LEADER_EPOCH: int = kafka_errors.FencedLeaderEpochError.errno
UNKNOWN_LEADER_EPOCH: int = kafka_errors.UnknownLeaderEpochError.errno
FETCH_SESSION_ID_NOT_FOUND: int = kafka_errors.FetchSessionIdNotFoundError.errno
INVALID_FETCH_SESSION_EPOCH: int = kafka_errors.InvalidFetchSessionEpochError.errno

_TABLE: dict[int, type[kafka_errors.BrokerResponseError]] = {
    ErrorCode.NONE: kafka_errors.NoError,
    # -- retriable in Meridian ------------------------------------------------------------
    ErrorCode.UNKNOWN_SERVER_ERROR: kafka_errors.UnknownError,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: kafka_errors.NotLeaderForPartitionError,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: kafka_errors.UnknownTopicOrPartitionError,
    ErrorCode.REQUEST_TIMED_OUT: kafka_errors.RequestTimedOutError,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: kafka_errors.CoordinatorNotAvailableError,
    ErrorCode.NOT_COORDINATOR: kafka_errors.NotCoordinatorError,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: kafka_errors.CoordinatorLoadInProgressError,
    ErrorCode.REBALANCE_IN_PROGRESS: kafka_errors.RebalanceInProgressError,
    ErrorCode.STORAGE_ERROR: kafka_errors.KafkaStorageError,
    # BROKER_NOT_AVAILABLE is not retriable in Kafka's clients; a starting broker is a
    # leader that is not available yet.
    ErrorCode.BROKER_NOT_AVAILABLE: kafka_errors.LeaderNotAvailableError,
    ErrorCode.THROTTLED: kafka_errors.ThrottlingQuotaExceededError,
    ErrorCode.NOT_ENOUGH_REPLICAS: kafka_errors.NotEnoughReplicasError,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: kafka_errors.NotEnoughReplicasAfterAppendError,
    ErrorCode.FENCED_LEADER_EPOCH: kafka_errors.FencedLeaderEpochError,
    ErrorCode.UNKNOWN_LEADER_EPOCH: kafka_errors.UnknownLeaderEpochError,
    ErrorCode.LEADER_NOT_AVAILABLE: kafka_errors.LeaderNotAvailableError,
    ErrorCode.LANE_TOPIC_PENDING: kafka_errors.LeaderNotAvailableError,
    ErrorCode.HANDOVER_IN_PROGRESS: kafka_errors.UnstableOffsetCommitError,
    ErrorCode.REMOTE_STORAGE_NOT_AVAILABLE: kafka_errors.KafkaStorageError,
    ErrorCode.CONCURRENT_TRANSACTIONS: kafka_errors.ConcurrentTransactionsError,
    ErrorCode.UNSTABLE_OFFSET_COMMIT: kafka_errors.UnstableOffsetCommitError,
    # A timer log being made on first use: what Kafka answers for a topic it is creating.
    ErrorCode.TIMER_LOG_PENDING: kafka_errors.LeaderNotAvailableError,
    # -- permanent ----------------------------------------------------------------------
    ErrorCode.INVALID_REQUEST: kafka_errors.InvalidRequestError,
    ErrorCode.CORRUPT_MESSAGE: kafka_errors.CorruptRecordError,
    ErrorCode.INVALID_RECORD: kafka_errors.InvalidRecordError,
    ErrorCode.MESSAGE_TOO_LARGE: kafka_errors.MessageSizeTooLargeError,
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: kafka_errors.UnsupportedCompressionTypeError,
    ErrorCode.OFFSET_OUT_OF_RANGE: kafka_errors.OffsetOutOfRangeError,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: kafka_errors.OutOfOrderSequenceNumberError,
    ErrorCode.INVALID_PRODUCER_EPOCH: kafka_errors.InvalidProducerEpochError,
    ErrorCode.UNKNOWN_PRODUCER_ID: kafka_errors.UnknownProducerIdError,
    ErrorCode.INVALID_TOPIC: kafka_errors.InvalidTopicError,
    ErrorCode.TOPIC_ALREADY_EXISTS: kafka_errors.TopicAlreadyExistsError,
    ErrorCode.INVALID_CONFIG: kafka_errors.InvalidConfigurationError,
    ErrorCode.INVALID_PARTITIONS: kafka_errors.InvalidPartitionsError,
    ErrorCode.ILLEGAL_GENERATION: kafka_errors.IllegalGenerationError,
    ErrorCode.UNKNOWN_MEMBER_ID: kafka_errors.UnknownMemberIdError,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: kafka_errors.InconsistentGroupProtocolError,
    ErrorCode.INVALID_SESSION_TIMEOUT: kafka_errors.InvalidSessionTimeoutError,
    ErrorCode.INVALID_GROUP_ID: kafka_errors.InvalidGroupIdError,
    ErrorCode.GROUP_ID_NOT_FOUND: kafka_errors.GroupIdNotFoundError,
    ErrorCode.NON_EMPTY_GROUP: kafka_errors.NonEmptyGroupError,
    ErrorCode.INVALID_COMMIT_OFFSET: kafka_errors.InvalidCommitOffsetSizeError,
    ErrorCode.INVALID_TIMESTAMP: kafka_errors.InvalidTimestampError,
    ErrorCode.INVALID_REQUIRED_ACKS: kafka_errors.InvalidRequiredAcksError,
    ErrorCode.POLICY_VIOLATION: kafka_errors.PolicyViolationError,
    ErrorCode.STALE_CONTROLLER_EPOCH: kafka_errors.StaleControllerEpochError,
    ErrorCode.UNAUTHENTICATED: kafka_errors.SaslAuthenticationFailedError,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: kafka_errors.TopicAuthorizationFailedError,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: kafka_errors.GroupAuthorizationFailedError,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: kafka_errors.ClusterAuthorizationFailedError,
    # A used-up storage quota is refused until the tenant frees space or gets more.
    ErrorCode.QUOTA_EXCEEDED: kafka_errors.PolicyViolationError,
    ErrorCode.REASSIGNMENT_IN_PROGRESS: kafka_errors.ReassignmentInProgressError,
    ErrorCode.LANE_NOT_FOUND: kafka_errors.InvalidTopicError,
    ErrorCode.REMOTE_SEGMENT_MISSING: kafka_errors.UnknownError,
    ErrorCode.REMOTE_SEGMENT_CORRUPT: kafka_errors.UnknownError,
    ErrorCode.INVALID_TXN_STATE: kafka_errors.InvalidTxnStateError,
    ErrorCode.PRODUCER_FENCED: kafka_errors.ProducerFencedError,
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: kafka_errors.InvalidTransactionTimeoutError,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (
        kafka_errors.TransactionalIdAuthorizationFailedError
    ),
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: kafka_errors.InvalidProducerIdMappingError,
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: kafka_errors.TransactionCoordinatorFencedError,
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: kafka_errors.TransactionalIdNotFoundError,
    ErrorCode.INVALID_TRANSACTIONAL_ID: kafka_errors.InvalidRequestError,
    ErrorCode.HALF_MESSAGE_NOT_FOUND: kafka_errors.UnknownError,  # no Kafka API has them
    # Delays: a bad x-deliver-at, or one in an idempotent producer's batch, is a record
    # the topic does not accept. The rest are answered only over gRPC.
    ErrorCode.INVALID_DELAY: kafka_errors.InvalidRecordError,
    ErrorCode.DELAY_NOT_IDEMPOTENT: kafka_errors.InvalidRecordError,
    ErrorCode.DELAYED_RECORD_NOT_FOUND: kafka_errors.UnknownError,
    ErrorCode.DELAYED_RECORD_DELIVERED: kafka_errors.UnknownError,
    ErrorCode.RETRY_POLICY_NOT_FOUND: kafka_errors.UnknownError,
}


def kafka_code(code: int) -> int:
    """The Kafka error code for Meridian's ``code`` (UNKNOWN_SERVER_ERROR if unmapped)."""
    kind = _TABLE.get(code)
    return int(kind.errno) if kind is not None else UNKNOWN_SERVER_ERROR


# The group APIs: Kafka's coordinators answer a failed log write or load with
# COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR, which every client retries after finding
# the coordinator again; a storage error there would be fatal to the Java client.
_GROUP_TABLE: dict[int, type[kafka_errors.BrokerResponseError]] = {
    ErrorCode.STORAGE_ERROR: kafka_errors.CoordinatorNotAvailableError,
    ErrorCode.BROKER_NOT_AVAILABLE: kafka_errors.CoordinatorNotAvailableError,
    ErrorCode.REQUEST_TIMED_OUT: kafka_errors.CoordinatorNotAvailableError,
    ErrorCode.UNKNOWN_SERVER_ERROR: kafka_errors.CoordinatorNotAvailableError,
    ErrorCode.MESSAGE_TOO_LARGE: kafka_errors.OffsetMetadataTooLargeError,
}


def group_code(code: int) -> int:
    """``kafka_code`` for an answer of a group API (see ``_GROUP_TABLE``)."""
    kind = _GROUP_TABLE.get(code)
    return int(kind.errno) if kind is not None else kafka_code(code)


def is_mapped(code: int) -> bool:
    return code in _TABLE
