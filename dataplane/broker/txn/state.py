"""A transactional id's state at its coordinator, and the rules of every change to it.

``TxnMetadata`` is Kafka's ``TransactionMetadata``: the producer id and epoch, the
transaction timeout, the state, the partitions of the open transaction and when it
began. A half message (RocketMQ's) is a transaction of its own, one partition, with
``half`` set (``HalfInfo``: its producer group, the record's key and headers for the
check-backs, how often and how many times to check back, and the default outcome).

The states and what moves between them::

    EMPTY / COMPLETE_* --AddPartitions--> ONGOING --EndTxn--> PREPARE_COMMIT | PREPARE_ABORT
    PREPARE_X --every partition's marker written--> COMPLETE_X
    ONGOING --InitProducerId, timeout, operator abort--> PREPARE_ABORT (epoch + 1: fenced)

Producer ids and epochs (Kafka's, with KIP-360): a fence bumps the epoch of the same
producer id (up to ``MAX_EPOCH``), so its markers close what the fenced producer
opened; InitProducerId bumps it too, and once the epochs are exhausted hands out a new
producer id, keeping the old one as ``previous_producer_id``; ``last_producer_epoch``
is the epoch before the last InitProducerId, so a retry whose answer was lost gets the
same answer instead of being fenced.

Each function here checks a request against a ``TxnMetadata`` and returns the new one
(never changing its argument) or raises the typed error the request gets; the
coordinator writes the new one to its log, and only once it is durable makes it
current. Pure: no I/O, no clock (times are arguments).

Errors: a producer id other than the transactional id's is
``INVALID_PRODUCER_ID_MAPPING``; an older epoch ``PRODUCER_FENCED`` (a newer producer,
the coordinator after the transaction's timeout, or an operator fenced it); a request a
state does not allow (EndTxn without a transaction, committing an aborted one or
aborting a committed one) ``INVALID_TXN_STATE``; anything while the last transaction's
markers are still being written ``CONCURRENT_TRANSACTIONS`` (retriable).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from dataplane.errors import ErrorCode, MeridianError

MAX_EPOCH = 2**15 - 1
TopicPartitionKey = tuple[str, int]


class TxnState(enum.IntEnum):
    """The values of ``txn.proto``'s ``TxnState``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def label(self) -> str:
        return self.name.replace("_", " ").lower()


def prepare_state(commit: bool) -> TxnState:
    return TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT


def complete_state(commit: bool) -> TxnState:
    return TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT


@dataclass(frozen=True, slots=True)
class HalfInfo:
    """What a half message adds to its transaction (module docstring)."""

    group: str
    half_id: str
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    check_interval_ms: int
    max_checks: int
    default_commit: bool
    client_id: str = ""
    checks: int = 0
    next_check_ms: int = 0
    resolved_by: str = ""  # producer, check-back, default, operator


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[TopicPartitionKey] = field(default_factory=frozenset)
    start_ms: int = -1  # when the open (or last) transaction began
    last_update_ms: int = -1
    half: HalfInfo | None = None
    previous_producer_id: int = -1  # before the last rotation (epochs exhausted)
    last_producer_epoch: int = -1  # before the last InitProducerId bump

    def replace(self, **changes: object) -> TxnMetadata:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @property
    def open(self) -> bool:
        return self.state is TxnState.ONGOING


# -- checks --------------------------------------------------------------------------
def check_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> None:
    """Raise unless (``producer_id``, ``epoch``) is the transactional id's producer now."""
    if producer_id != meta.producer_id:
        raise MeridianError(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            f"producer id {producer_id} is not transactional id {meta.transactional_id!r}'s",
        )
    if epoch != meta.producer_epoch:
        raise MeridianError(
            ErrorCode.PRODUCER_FENCED,
            f"transactional id {meta.transactional_id!r}: epoch {epoch} is fenced by epoch "
            f"{meta.producer_epoch} (a newer producer, the transaction's timeout or an "
            "operator's abort)",
        )


def check_not_completing(meta: TxnMetadata) -> None:
    if meta.state.preparing:
        raise MeridianError(
            ErrorCode.CONCURRENT_TRANSACTIONS,
            f"transactional id {meta.transactional_id!r}: the last transaction is being "
            f"completed ({meta.state.label})",
        )


# -- transitions ---------------------------------------------------------------------
def epoch_exhausted(epoch: int) -> bool:
    """A producer at this epoch cannot be bumped again: the next InitProducerId gives a
    new producer id (Kafka's ``isEpochExhausted``). A fence may still use the last
    epoch, ``MAX_EPOCH``, for its markers."""
    return epoch >= MAX_EPOCH - 1


def is_init_retry(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """InitProducerId with the caller's (``producer_id``, ``epoch``) (KIP-360; -1: a new
    producer): True when it is the retry of a bump already made, to be answered with
    the current id and epoch; False when the producer is to be bumped. Raises
    ``PRODUCER_FENCED`` for an older epoch, ``INVALID_PRODUCER_ID_MAPPING`` for an id
    that is neither the current nor the previous one."""
    if producer_id < 0:
        return False
    idle = meta.state is TxnState.EMPTY
    if producer_id == meta.producer_id:
        if epoch == meta.producer_epoch:
            return False
        if epoch >= 0 and epoch == meta.last_producer_epoch and idle:
            return True  # the answer to this bump was lost
    elif producer_id == meta.previous_producer_id and epoch_exhausted(epoch):
        if epoch == meta.last_producer_epoch and idle:
            return True  # the answer to the rotation was lost
    else:
        raise MeridianError(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            f"producer id {producer_id} is not transactional id {meta.transactional_id!r}'s",
        )
    raise MeridianError(
        ErrorCode.PRODUCER_FENCED,
        f"transactional id {meta.transactional_id!r}: epoch {epoch} is fenced by epoch "
        f"{meta.producer_epoch} (a newer producer, the transaction's timeout or an "
        "operator's abort)",
    )


def init_producer(
    meta: TxnMetadata, timeout_ms: int, new_producer_id: int, now_ms: int
) -> TxnMetadata:
    """InitProducerId on a transactional id with no open transaction: the next epoch
    and the new timeout; once its epochs run out (``epoch_exhausted``),
    ``new_producer_id`` at epoch 0, the old id kept as ``previous_producer_id``."""
    check_not_completing(meta)
    if meta.open:
        raise AssertionError("an open transaction is aborted (fence) before a new producer")
    if epoch_exhausted(meta.producer_epoch):
        producer_id, epoch, previous = new_producer_id, 0, meta.producer_id
    else:
        producer_id, epoch = meta.producer_id, meta.producer_epoch + 1
        previous = meta.previous_producer_id
    return meta.replace(
        producer_id=producer_id,
        producer_epoch=epoch,
        previous_producer_id=previous,
        last_producer_epoch=meta.producer_epoch,
        timeout_ms=timeout_ms,
        state=TxnState.EMPTY,
        partitions=frozenset(),
        last_update_ms=now_ms,
    )


def fence(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Abort the open transaction with the next epoch of the same producer id
    (InitProducerId of a new producer, a timeout, an operator): the markers carry it, so
    the old producer is fenced on every partition of the transaction and its open
    transaction there closed (a marker of another id would close nothing). A producer's
    epoch is below ``MAX_EPOCH``, so the fence's fits."""
    if meta.producer_epoch >= MAX_EPOCH:
        raise AssertionError("no producer holds the last epoch: nothing is open at it")
    return meta.replace(
        producer_epoch=meta.producer_epoch + 1,
        last_producer_epoch=-1,
        state=TxnState.PREPARE_ABORT,
        last_update_ms=now_ms,
    )


def add_partitions(
    meta: TxnMetadata,
    producer_id: int,
    epoch: int,
    partitions: frozenset[TopicPartitionKey],
    now_ms: int,
    max_partitions: int = 2**31,
) -> TxnMetadata:
    """AddPartitionsToTxn (and AddOffsetsToTxn): open a transaction, or add to it; a
    transaction of more than ``max_partitions`` partitions is ``QUOTA_EXCEEDED`` (its
    partitions are kept in the coordinator's memory and each gets a marker)."""
    check_producer(meta, producer_id, epoch)
    check_not_completing(meta)
    total = len(meta.partitions | partitions) if meta.open else len(partitions)
    if total > max_partitions:
        raise MeridianError(
            ErrorCode.QUOTA_EXCEEDED,
            f"transactional id {meta.transactional_id!r}: a transaction may hold at most "
            f"{max_partitions} partitions (the brokers' txn_max_partitions), not {total}",
        )
    if meta.open:
        if partitions <= meta.partitions:
            return meta
        return meta.replace(partitions=meta.partitions | partitions, last_update_ms=now_ms)
    return meta.replace(
        state=TxnState.ONGOING,
        partitions=partitions,
        start_ms=now_ms,
        last_update_ms=now_ms,
    )


def end_txn(
    meta: TxnMetadata, producer_id: int, epoch: int, commit: bool, now_ms: int
) -> TxnMetadata:
    """EndTxn: ONGOING moves to PREPARE_*; a retry of an EndTxn already decided the same
    way returns ``meta`` unchanged; anything else is refused (module docstring)."""
    check_producer(meta, producer_id, epoch)
    wanted = "commit" if commit else "abort"
    if meta.open:
        return meta.replace(state=prepare_state(commit), last_update_ms=now_ms)
    if meta.state in (prepare_state(commit), complete_state(commit)):
        return meta  # the same EndTxn again (a retry): already decided that way
    if meta.state in (prepare_state(not commit), complete_state(not commit)):
        done = "aborted" if commit else "committed"
        raise MeridianError(
            ErrorCode.INVALID_TXN_STATE,
            f"cannot {wanted} transactional id {meta.transactional_id!r}: its transaction "
            f"was {done}",
        )
    raise MeridianError(
        ErrorCode.INVALID_TXN_STATE,
        f"cannot {wanted} transactional id {meta.transactional_id!r}: no transaction is open",
    )


def complete(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Every marker of a PREPARE_* transaction is written."""
    if not meta.state.preparing:
        raise AssertionError(f"completing a transaction in state {meta.state.name}")
    commit = meta.state is TxnState.PREPARE_COMMIT
    # A half message keeps its one partition: it is what it is about.
    partitions = meta.partitions if meta.half is not None else frozenset()
    return meta.replace(state=complete_state(commit), partitions=partitions, last_update_ms=now_ms)


def timed_out(meta: TxnMetadata, now_ms: int) -> bool:
    """An open Kafka transaction past its timeout (half messages are checked back
    instead)."""
    return meta.open and meta.half is None and now_ms - meta.start_ms > meta.timeout_ms


# -- half messages -------------------------------------------------------------------
def decide_half(meta: TxnMetadata, commit: bool, resolved_by: str, now_ms: int) -> TxnMetadata:
    """A half message's outcome (its producer, a check-back answer, the default, an
    operator): PREPARE_*; the same outcome again is a no-op; the other one is
    ``INVALID_TXN_STATE``."""
    assert meta.half is not None
    if meta.open:
        half = dataclasses.replace(meta.half, resolved_by=resolved_by)
        return meta.replace(state=prepare_state(commit), half=half, last_update_ms=now_ms)
    if meta.state in (prepare_state(commit), complete_state(commit)):
        return meta
    done = "rolled back" if commit else "committed"
    wanted = "commit" if commit else "roll back"
    raise MeridianError(
        ErrorCode.INVALID_TXN_STATE,
        f"cannot {wanted} half message {meta.half.half_id} of {meta.half.group!r}: it was {done}",
    )


def checked(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """One more check-back of an open half message sent (or due with no producer to ask)."""
    assert meta.half is not None
    half = dataclasses.replace(
        meta.half, checks=meta.half.checks + 1, next_check_ms=now_ms + meta.half.check_interval_ms
    )
    return meta.replace(half=half, last_update_ms=now_ms)
