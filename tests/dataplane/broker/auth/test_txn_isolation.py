"""Tenant isolation of transactions and half messages, with authentication on: another
tenant's transactional ids and producer groups are refused by name on every
``Transactions`` call, the same whether they exist or not (so nothing tells them apart);
lists never mention them; a tenant cannot add another's topic to its transaction, nor
fence another's producer; and ``TxnMarkers`` is internal to the cluster."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from dataplane._gen.meridian.v1 import common_pb2, txn_pb2, txn_pb2_grpc
from dataplane.client import Producer
from dataplane.client.connection import ChannelSecurity
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer

from .support import caller, outcome, produce_request, refusal

BETA_TXN = "beta.loader"  # exists: beta's producer has a transaction open
BETA_GROUP = "beta.payments"  # exists: a half message of it waits


@pytest.fixture(scope="module")
def beta_work(secured_broker: BrokerProcess, issuer: TestIssuer) -> Iterator[None]:
    token = issuer.token(tenants={"beta": "developer"})
    producer = Producer(secured_broker.address, transactional_id=BETA_TXN, credentials=token)
    halves = Producer(
        secured_broker.address,
        producer_group=BETA_GROUP,
        half_check_interval_ms=600_000,
        credentials=token,
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("beta.secret", b"beta's", partition=0)
        producer.flush()
        halves.send_half("beta.secret", b"beta's half", partition=0)
        yield
    finally:
        producer.close(1)
        halves.close(1)


@pytest.fixture
def acme(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> Iterator[txn_pb2_grpc.TransactionsStub]:
    token = issuer.token(tenants={"acme": "tenant-admin"})
    with ChannelSecurity.of(token).channel(secured_broker.address) as channel:
        yield txn_pb2_grpc.TransactionsStub(channel)


def requests(name: str) -> list[tuple[str, object]]:
    """One request of each ``Transactions`` RPC naming ``name``."""
    return [
        ("FindCoordinator", txn_pb2.FindTxnCoordinatorRequest(transactional_id=name)),
        (
            "InitProducerId",
            txn_pb2.TxnInitProducerIdRequest(transactional_id=name, transaction_timeout_ms=1000),
        ),
        ("AddPartitions", txn_pb2.AddPartitionsToTxnRequest(transactional_id=name, producer_id=1)),
        ("AddOffsets", txn_pb2.AddOffsetsToTxnRequest(transactional_id=name, group_id="acme.g")),
        ("EndTxn", txn_pb2.EndTxnRequest(transactional_id=name, producer_id=1, commit=True)),
        ("AbortTransaction", txn_pb2.AbortTransactionRequest(transactional_id=name)),
        ("BeginHalf", txn_pb2.BeginHalfRequest(producer_group=name, topic="acme.orders")),
        ("EndHalf", txn_pb2.EndHalfRequest(producer_group=name, half_id="1", outcome=1)),
        ("ListHalfMessages", txn_pb2.ListHalfMessagesRequest(producer_group=name)),
    ]


def test_another_tenants_names_are_refused_alike_whether_they_exist_or_not(
    beta_work: None, acme: txn_pb2_grpc.TransactionsStub
) -> None:
    for (rpc, existing), (_, missing) in zip(
        requests(BETA_TXN), requests("beta.never"), strict=True
    ):
        name = BETA_TXN
        if rpc in ("BeginHalf", "EndHalf", "ListHalfMessages"):
            existing = next(r for n, r in requests(BETA_GROUP) if n == rpc)
            name = BETA_GROUP
        refused = refusal(getattr(acme, rpc), existing)
        assert refused.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, rpc
        answered = outcome(getattr(acme, rpc), existing).replace(name, "X")
        assert answered == outcome(getattr(acme, rpc), missing).replace("beta.never", "X"), rpc
    described = acme.DescribeTransactions(
        txn_pb2.DescribeTransactionsRequest(transactional_ids=[BETA_TXN, "beta.never"]), timeout=10
    ).transactions
    assert [d.error for d in described] == [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2
    listed = acme.ListTransactions(txn_pb2.ListTransactionsRequest(), timeout=10).transactions
    assert not [t for t in listed if t.transactional_id.startswith("beta.")]
    halves = acme.ListHalfMessages(txn_pb2.ListHalfMessagesRequest(), timeout=10).half_messages
    assert not [h for h in halves if h.producer_group.startswith("beta.")]


def test_a_tenant_cannot_add_another_tenants_topic_nor_fence_its_producer(
    beta_work: None,
    secured_broker: BrokerProcess,
    issuer: TestIssuer,
    acme: txn_pb2_grpc.TransactionsStub,
) -> None:
    init = txn_pb2.TxnInitProducerIdRequest(
        transactional_id="acme.mine", transaction_timeout_ms=60_000
    )
    mine = acme.InitProducerId(init, timeout=10)
    assert mine.error == ErrorCode.NONE
    add = txn_pb2.AddPartitionsToTxnRequest(
        transactional_id="acme.mine",
        producer_id=mine.producer_id,
        producer_epoch=mine.producer_epoch,
        partitions=[common_pb2.TopicPartition(topic="beta.secret", partition=0)],
    )
    (result,) = acme.AddPartitions(add, timeout=10).results
    assert result.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # beta's transaction is still open and its producer's: acme's calls fenced nothing
    internal = issuer.internal_token()
    with ChannelSecurity.of(internal).channel(secured_broker.address) as channel:
        stub = txn_pb2_grpc.TransactionsStub(channel)
        request = txn_pb2.DescribeTransactionsRequest(transactional_ids=[BETA_TXN])
        (beta,) = stub.DescribeTransactions(request, timeout=10).transactions
    assert beta.state == txn_pb2.TXN_ONGOING
    assert beta.producer_epoch == 0


def test_a_produce_naming_another_tenants_transactional_id_learns_nothing_of_it(
    beta_work: None,
    secured_broker: BrokerProcess,
    issuer: TestIssuer,
    acme: txn_pb2_grpc.TransactionsStub,
) -> None:
    """A transactional batch to acme's own topic under beta's transactional id, with
    beta's very producer id and epoch, is answered as one under an id that never
    existed: refused by the name before the coordinator is asked, so its answers (the
    id's producer, epoch, state) reach no other tenant. (The Kafka listener's Produce
    goes through the same guard.)"""
    internal = issuer.internal_token()
    with ChannelSecurity.of(internal).channel(secured_broker.address) as channel:
        stub = txn_pb2_grpc.TransactionsStub(channel)
        request = txn_pb2.DescribeTransactionsRequest(transactional_ids=[BETA_TXN])
        (beta,) = stub.DescribeTransactions(request, timeout=10).transactions
    token = issuer.token(tenants={"acme": "tenant-admin"})
    answers = []
    with caller(secured_broker.address, token) as acme_broker:
        for name, pid, epoch in (
            (BETA_TXN, beta.producer_id, beta.producer_epoch),
            ("beta.never", beta.producer_id + 1000, 0),
        ):
            batch = build_batch(
                [b"x"],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=0,
                is_transactional=True,
            )
            request = produce_request("acme.orders", 0, batch)
            request.transactional_id = name
            (result,) = acme_broker.broker.Produce(request, timeout=10).results
            assert result.error == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, result
            answers.append(result.error_message.replace(name, "X"))
    assert answers[0] == answers[1]


def test_markers_and_verification_are_internal(
    secured_broker: BrokerProcess, acme: txn_pb2_grpc.TransactionsStub, issuer: TestIssuer
) -> None:
    token = issuer.token(tenants={"acme": "tenant-admin"})
    with ChannelSecurity.of(token).channel(secured_broker.address) as channel:
        markers = txn_pb2_grpc.TxnMarkersStub(channel)
        write = txn_pb2.WriteTxnMarkersRequest(markers=[txn_pb2.TxnMarker(producer_id=1)])
        with pytest.raises(grpc.RpcError):
            markers.WriteTxnMarkers(write, timeout=10)
        assert refusal(markers.VerifyTxn, txn_pb2.VerifyTxnRequest()).code == (
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )


def test_only_an_administrator_of_the_group_resolves_a_half_message_as_operator(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    """A producer (developer) of the group ends its half messages, but cannot have its
    decision recorded as an operator's (metrics, console)."""
    token = issuer.token(tenants={"acme": "developer"})
    with ChannelSecurity.of(token).channel(secured_broker.address) as channel:
        stub = txn_pb2_grpc.TransactionsStub(channel)
        request = txn_pb2.EndHalfRequest(
            producer_group="acme.payments", half_id="1", outcome=txn_pb2.HALF_COMMIT
        )
        assert refusal(stub.EndHalf, request).code == ErrorCode.HALF_MESSAGE_NOT_FOUND
        request.by_operator = True
        assert refusal(stub.EndHalf, request).code == (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
