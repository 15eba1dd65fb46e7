"""Administering transactions and half messages: what ``Admin`` (and through it the
control plane and the CLI) asks the transaction coordinators.

``list_transactions`` and ``list_half_messages`` ask every broker of the cluster (each
lists what it coordinates and the caller may describe); ``describe_transaction``,
``abort_transaction`` and ``resolve_half_message`` go to the coordinator of the id (found,
and found again after it moves, as ``transactions.coordinator_link`` does).
``abort_transaction`` aborts a transactional id's open transaction and fences its
producer (a hanging transaction: its producer is gone and its timeout far); a half
message an operator resolves is recorded as resolved by an operator.

``describe_producers`` and ``abort_producer`` go to a partition's leader instead (found
again after it moves): its producers with their open transactions there, and an
operator's abort marker for one of them (Kafka's ``kafka-transactions --abort``), for a
transaction hanging on that partition that its coordinator cannot end.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import txn_pb2, txn_pb2_grpc
from dataplane.client.coordinator import REQUEST_TIMEOUT_S
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.transactions import coordinator_link
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

STATES = {value: name.removeprefix("TXN_").lower() for name, value in txn_pb2.TxnState.items()}
OUTCOMES = {
    txn_pb2.HALF_COMMIT: "commit",
    txn_pb2.HALF_ROLLBACK: "rollback",
    txn_pb2.HALF_UNKNOWN: "",
}


@dataclass(frozen=True)
class TransactionListing:
    """A transactional id at its coordinator: ``state`` is ``empty``, ``ongoing``,
    ``prepare_commit``, ``prepare_abort``, ``complete_commit`` or ``complete_abort``;
    ``start_ms`` (-1: none open) is when the open transaction began."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    last_update_ms: int
    partitions: tuple[TopicPartition, ...]
    coordinator_id: int


@dataclass(frozen=True)
class HalfMessageListing:
    """A half message at its group's coordinator: ``state`` ``ongoing`` while undecided;
    ``resolved_by`` (producer, check-back, default, operator) once decided."""

    producer_group: str
    half_id: str
    topic: str
    partition: int
    key: bytes | None
    state: str
    created_ms: int
    checks: int
    max_checks: int
    next_check_ms: int
    default_outcome: str
    client_id: str
    resolved_by: str


def _listing(d: txn_pb2.TransactionDescription) -> TransactionListing:
    return TransactionListing(
        d.transactional_id,
        STATES[d.state],
        d.producer_id,
        d.producer_epoch,
        d.transaction_timeout_ms,
        d.transaction_start_ms,
        d.last_update_ms,
        tuple(TopicPartition(tp.topic, tp.partition) for tp in d.partitions),
        d.coordinator_id,
    )


def _half(h: txn_pb2.HalfMessage) -> HalfMessageListing:
    return HalfMessageListing(
        h.producer_group,
        h.half_id,
        h.topic,
        h.partition,
        h.key or None,
        STATES[h.state],
        h.created_ms,
        h.checks,
        h.max_checks,
        h.next_check_ms,
        OUTCOMES[h.default_outcome],
        h.client_id,
        h.resolved_by,
    )


@dataclass(frozen=True)
class ProducerListing:
    """A producer of a partition at its leader: ``txn_first_offset`` is where its open
    transaction there began (-1: none open)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    txn_first_offset: int
    coordinator_epoch: int


_LEADER_ATTEMPTS = 5
_SETTLE_POLL_S = 0.1  # how often an abort's state is looked at while its markers are written


def _at_leader(metadata: ClusterMetadata, tp: TopicPartition, rpc: str, request: object) -> Any:
    """``rpc`` at ``tp``'s leader, found again (a few times) when it moved."""
    last: MeridianError | None = None
    for attempt in range(_LEADER_ATTEMPTS):
        if attempt:
            time.sleep(0.1 * 2 ** (attempt - 1))
            metadata.refresh([tp.topic])
        try:
            address = metadata.leader_for(tp.topic, tp.partition).address
            stub = txn_pb2_grpc.TransactionsStub(metadata.pool.get(address).channel)
            return getattr(stub, rpc)(request, timeout=REQUEST_TIMEOUT_S)
        except grpc.RpcError as exc:
            last = error_from_rpc(exc)
        except MeridianError as error:
            last = error
        if not last.retriable:
            raise last
    assert last is not None
    raise last


def describe_producers(metadata: ClusterMetadata, tp: TopicPartition) -> list[ProducerListing]:
    """The producers of ``tp`` at its leader, with their open transactions there."""
    request = txn_pb2.DescribeProducersRequest(topic=tp.topic, partition=tp.partition)
    response = _at_leader(metadata, tp, "DescribeProducers", request)
    return [
        ProducerListing(
            p.producer_id,
            p.producer_epoch,
            p.last_sequence,
            p.txn_first_offset,
            p.coordinator_epoch,
        )
        for p in response.producers
    ]


def abort_producer(metadata: ClusterMetadata, tp: TopicPartition, producer_id: int) -> int:
    """Write an abort marker for ``producer_id``'s transaction open on ``tp``; the offset
    where that transaction began. ``INVALID_TXN_STATE`` when none is open there."""
    request = txn_pb2.AbortProducerRequest(
        topic=tp.topic, partition=tp.partition, producer_id=producer_id
    )
    return int(_at_leader(metadata, tp, "AbortProducer", request).txn_first_offset)


def _every_broker(metadata: ClusterMetadata, rpc: str, request: object) -> list[object]:
    metadata.refresh()
    answers = []
    for broker in metadata.snapshot().brokers.values():
        stub = txn_pb2_grpc.TransactionsStub(metadata.pool.get(broker.address).channel)
        try:
            answers.append(getattr(stub, rpc)(request, timeout=REQUEST_TIMEOUT_S))
        except grpc.RpcError as exc:
            metadata.pool.forget(broker.address)
            raise error_from_rpc(exc) from exc
    return answers


def list_transactions(
    metadata: ClusterMetadata, states: Iterable[str] = ()
) -> list[TransactionListing]:
    """Every transactional id of the cluster the caller may describe, in ``states``
    (names as ``TransactionListing.state``; none: every state)."""
    by_name = {name: value for value, name in STATES.items()}
    request = txn_pb2.ListTransactionsRequest(states=[by_name[s] for s in states])
    found = [
        _listing(d)
        for answer in _every_broker(metadata, "ListTransactions", request)
        for d in answer.transactions  # type: ignore[attr-defined]
    ]
    return sorted(found, key=lambda t: t.transactional_id)


def describe_transaction(metadata: ClusterMetadata, transactional_id: str) -> TransactionListing:
    """The transactional id at its coordinator (``TRANSACTIONAL_ID_NOT_FOUND``)."""
    request = txn_pb2.DescribeTransactionsRequest(transactional_ids=[transactional_id])

    def check(response: txn_pb2.DescribeTransactionsResponse) -> None:
        found = response.transactions[0]
        if found.error:
            raise MeridianError(found.error, found.error_message)

    link = coordinator_link(metadata, transactional_id)
    response = link.call("DescribeTransactions", request, check=check)
    return _listing(response.transactions[0])


def abort_transaction(metadata: ClusterMetadata, transactional_id: str) -> TransactionListing:
    """Abort the transactional id's open transaction, fencing its producer; the state
    after (``complete_abort`` once its markers are written). ``INVALID_TXN_STATE`` when
    none is open.

    The abort is asked once: asked again after it was recorded, it would find the
    transaction no longer open. ``CONCURRENT_TRANSACTIONS`` (its markers still being
    written, or another end under way) is not retried: the state is watched instead, for
    up to the metadata's ``api_timeout_s``, and answered as it is then
    (``prepare_abort`` while markers are still pending)."""
    link = coordinator_link(metadata, transactional_id, retry=frozenset())
    request = txn_pb2.AbortTransactionRequest(transactional_id=transactional_id)
    try:
        link.call("AbortTransaction", request)
    except MeridianError as error:
        if error.code != ErrorCode.CONCURRENT_TRANSACTIONS:
            raise
    deadline = time.monotonic() + metadata.api_timeout_s
    while True:
        listing = describe_transaction(metadata, transactional_id)
        if not listing.state.startswith("prepare_") or time.monotonic() >= deadline:
            return listing
        time.sleep(_SETTLE_POLL_S)


def list_half_messages(
    metadata: ClusterMetadata, producer_group: str | None = None
) -> list[HalfMessageListing]:
    """The half messages of ``producer_group`` (None: of every group the caller may
    describe), pending and recently decided."""
    request = txn_pb2.ListHalfMessagesRequest(producer_group=producer_group or "")
    found = [
        _half(h)
        for answer in _every_broker(metadata, "ListHalfMessages", request)
        for h in answer.half_messages  # type: ignore[attr-defined]
    ]
    return sorted(found, key=lambda h: (h.producer_group, h.created_ms, h.half_id))


def resolve_half_message(
    metadata: ClusterMetadata, producer_group: str, half_id: str, *, commit: bool
) -> str:
    """Commit or roll back a half message as an operator; its state after."""
    request = txn_pb2.EndHalfRequest(
        producer_group=producer_group,
        half_id=half_id,
        outcome=txn_pb2.HALF_COMMIT if commit else txn_pb2.HALF_ROLLBACK,
        by_operator=True,
    )
    response = coordinator_link(metadata, producer_group).call("EndHalf", request)
    return STATES[response.state]
