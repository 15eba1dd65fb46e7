"""Transactions and half messages on three real broker processes: what read_committed and
read_uncommitted consumers see, kafka-python reading our transactional and control
batches, fencing, timeouts, half messages, and every kind of bad input answered with its
typed error and nothing visible that was not committed."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from kafka.record import MemoryRecords
from prometheus_client.parser import text_string_to_metric_families

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc, txn_pb2, txn_pb2_grpc
from dataplane.client import Admin, MeridianError, Producer, TopicPartition
from dataplane.client.halves import HalfMessage, HalfOutcome
from dataplane.errors import ErrorCode, error_from_rpc
from dataplane.records import build_batch
from dataplane.records.control import build_marker
from tests.dataplane.broker.txn.support import (
    coordinator_of,
    describe,
    ends,
    leader_of,
    read_topic,
    stable,
    values,
)
from tests.dataplane.storage.support import wait_for
from tests.support.brokers import BrokerProcess, start_cluster, stop_all, wait_for_cluster


@pytest.fixture(scope="module")
def brokers(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[list[BrokerProcess]]:
    root: Path = tmp_path_factory.mktemp("txn")
    cluster = start_cluster(root, 3)
    failed_before = request.session.testsfailed
    try:
        wait_for_cluster(cluster)
        yield cluster
    finally:
        if request.session.testsfailed > failed_before:
            for broker in cluster:
                print(f"===== log of {broker!r} =====\n{broker.log_text()[-20000:]}")
        stop_all(cluster)


@pytest.fixture(scope="module")
def bootstrap(brokers: list[BrokerProcess]) -> str:
    return brokers[0].address


def topic_of(bootstrap: str, name: str, partitions: int = 3) -> str:
    with Admin(bootstrap) as admin:
        admin.create_topic(name, partitions)
    return name


def send_all(producer: Producer, topic: str, prefix: str, count: int = 6) -> list[bytes]:
    sent = [f"{prefix}{i}".encode() for i in range(count)]
    for i, value in enumerate(sent):
        producer.send(topic, value, partition=i % 3)
    return sent


def test_read_committed_sees_each_transaction_whole_or_not_at_all(bootstrap: str) -> None:
    topic = topic_of(bootstrap, "acme.txn-visibility")
    producer = Producer(bootstrap, transactional_id="acme.visibility", linger_ms=1)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        committed = send_all(producer, topic, "c")
        producer.commit_transaction()
        producer.begin_transaction()
        aborted = send_all(producer, topic, "a")
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        still_open = send_all(producer, topic, "o")
        producer.flush()
        tps = [TopicPartition(topic, p) for p in range(3)]
        stable, high = ends(bootstrap, tps, committed=True), ends(bootstrap, tps, committed=False)
        assert all(stable[tp] < high[tp] for tp in tps), "the open transaction holds every LSO"
        assert values(read_topic(bootstrap, topic, 3, committed=True)) == sorted(committed)
        everything = read_topic(bootstrap, topic, 3, committed=False)
        assert values(everything) == sorted(committed + aborted + still_open)
        producer.commit_transaction()
        assert wait_for(
            lambda: ends(bootstrap, tps, committed=True) == ends(bootstrap, tps, committed=False)
        )
        seen = read_topic(bootstrap, topic, 3, committed=True)
        assert values(seen) == sorted(committed + still_open)
        for p in range(3):  # in order within each partition
            offsets = [r.offset for r in seen if r.partition == p]
            assert offsets == sorted(offsets)
    finally:
        producer.close()


def test_back_to_back_transactions_of_pipelined_batches_all_commit(bootstrap: str) -> None:
    """Small transactions in a row, each several batches in flight on every partition at
    once: every one commits (the batches waiting for a partition's verification are
    appended in order; a partition still being added when one transaction ends does not
    pass for added in the next), and read_committed sees each record once."""
    topic = topic_of(bootstrap, "acme.txn-back-to-back")
    producer = Producer(
        bootstrap, transactional_id="acme.back-to-back", linger_ms=0, batch_bytes=4096
    )
    sent: list[bytes] = []
    try:
        producer.init_transactions()
        for t in range(30):
            producer.begin_transaction()
            for i in range(300):
                value = f"t{t}-{i}-".encode().ljust(100, b".")
                producer.send(topic, value, partition=i % 3)
                sent.append(value)
            producer.commit_transaction()
    finally:
        producer.close()
    assert wait_for(lambda: stable(bootstrap, topic))
    assert values(read_topic(bootstrap, topic, 3, committed=True)) == sorted(sent)


def test_kafka_python_reads_our_transactional_and_control_batches(
    brokers: list[BrokerProcess], bootstrap: str
) -> None:
    topic = topic_of(bootstrap, "acme.txn-format", partitions=1)
    producer = Producer(bootstrap, transactional_id="acme.format", linger_ms=1)
    try:
        producer.init_transactions()
        for commit in (True, False):
            producer.begin_transaction()
            producer.send(topic, b"kept" if commit else b"dropped", partition=0)
            producer.flush()
            (producer.commit_transaction if commit else producer.abort_transaction)()
        pid = producer._txn.producer_id  # type: ignore[union-attr]
    finally:
        producer.close()
    leader = leader_of(brokers, topic, 0)
    assert wait_for(lambda: stable(bootstrap, topic, 1))
    with leader.channel() as channel:
        request = broker_pb2.FetchRequest(
            max_wait_ms=0,
            isolation_level=broker_pb2.READ_COMMITTED,
            partitions=[broker_pb2.FetchPartition(topic=topic, partition=0, fetch_offset=0)],
        )
        (result,) = broker_pb2_grpc.BrokerStub(channel).Fetch(request, timeout=10).results
    assert [(a.producer_id, a.first_offset) for a in result.aborted_transactions] == [(pid, 2)]
    records = MemoryRecords(bytes(result.records))
    seen = []
    while (batch := records.next_batch()) is not None:
        batch.validate_crc()
        assert batch.is_transactional
        assert batch.producer_id == pid
        for record in batch:
            if batch.is_control_batch:
                seen.append(("commit" if record.commit else "abort", record.offset))
            else:
                seen.append((record.value.decode(), record.offset))
    assert seen == [("kept", 0), ("commit", 1), ("dropped", 2), ("abort", 3)]


def test_a_second_producer_of_an_id_fences_the_first(bootstrap: str) -> None:
    topic = topic_of(bootstrap, "acme.txn-zombie")
    zombie = Producer(bootstrap, transactional_id="acme.zombie", linger_ms=1)
    fresh = Producer(bootstrap, transactional_id="acme.zombie", linger_ms=1)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie_sent = send_all(zombie, topic, "z")
        zombie.flush()
        fresh.init_transactions()  # aborts the zombie's transaction, fences its epoch
        fresh.begin_transaction()
        fresh_sent = send_all(fresh, topic, "f")
        fresh.commit_transaction()
        late = zombie.send(topic, b"late", partition=0)
        with pytest.raises(MeridianError) as caught:
            zombie.commit_transaction()
        assert caught.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
        assert late.exception() is not None
        with pytest.raises(MeridianError):  # fatal: the zombie can do nothing more
            zombie.begin_transaction()
        assert wait_for(lambda: stable(bootstrap, topic))
        visible = values(read_topic(bootstrap, topic, 3, committed=True))
        assert visible == sorted(fresh_sent)
        assert not set(zombie_sent) & set(visible)
    finally:
        zombie.close()
        fresh.close()


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(bootstrap: str) -> None:
    topic = topic_of(bootstrap, "acme.txn-timeout")
    producer = Producer(
        bootstrap, transactional_id="acme.slow", linger_ms=1, transaction_timeout_ms=1_500
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        send_all(producer, topic, "s")
        producer.flush()
        _, coordinator = coordinator_of(bootstrap, "acme.slow")
        assert wait_for(
            lambda: describe(coordinator, "acme.slow").state == txn_pb2.TXN_COMPLETE_ABORT, 30
        )
        with pytest.raises(MeridianError) as caught:
            producer.commit_transaction()
        assert caught.value.code == ErrorCode.PRODUCER_FENCED
        assert read_topic(bootstrap, topic, 3, committed=True) == []
    finally:
        producer.close()


def test_bad_transactional_input_is_refused_and_changes_nothing(
    brokers: list[BrokerProcess], bootstrap: str
) -> None:
    topic = topic_of(bootstrap, "acme.txn-bad", partitions=1)
    leader = leader_of(brokers, topic, 0)
    with leader.channel() as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)

        def produce(
            records: bytes, transactional_id: str = ""
        ) -> broker_pb2.PartitionProduceResult:
            request = broker_pb2.ProduceRequest(
                acks=-1,
                transactional_id=transactional_id,
                partitions=[broker_pb2.PartitionRecords(topic=topic, partition=0, records=records)],
            )
            return stub.Produce(request, timeout=10).results[0]

        loose = build_batch(
            [b"x"], producer_id=77, producer_epoch=0, base_sequence=0, is_transactional=True
        )
        assert produce(loose).error == ErrorCode.INVALID_TXN_STATE  # in no transaction
        assert produce(loose, "acme.nobody").error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        marker = build_marker(77, 0, commit=True, coordinator_epoch=0)
        assert produce(marker).error == ErrorCode.INVALID_RECORD  # only brokers write markers
        no_pid = build_batch([b"x"], is_transactional=False)
        assert produce(no_pid).error == ErrorCode.NONE
        assert (
            ends(bootstrap, [TopicPartition(topic, 0)], committed=False)[TopicPartition(topic, 0)]
            == 1
        )

    producer = Producer(bootstrap, transactional_id="acme.bad", linger_ms=1)
    try:
        with pytest.raises(MeridianError) as caught:
            producer.send(topic, b"before init")
        assert caught.value.code == ErrorCode.INVALID_TXN_STATE
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"doomed", partition=0)
        producer.flush()
        producer.abort_transaction()
        pid, epoch = producer._txn.producer_id, producer._txn.epoch  # type: ignore[union-attr]
        _, coordinator = coordinator_of(bootstrap, "acme.bad")
        with grpc.insecure_channel(coordinator) as channel:
            txn = txn_pb2_grpc.TransactionsStub(channel)
            end = txn_pb2.EndTxnRequest(
                transactional_id="acme.bad", producer_id=pid, producer_epoch=epoch, commit=True
            )
            with pytest.raises(grpc.RpcError) as refused:
                txn.EndTxn(end, timeout=10)  # committing the aborted transaction
            assert error_from_rpc(refused.value).code == ErrorCode.INVALID_TXN_STATE
            init = txn_pb2.TxnInitProducerIdRequest(
                transactional_id="x" * 300, transaction_timeout_ms=1000, producer_id=-1
            )
            assert txn.InitProducerId(init, timeout=10).error == ErrorCode.INVALID_TRANSACTIONAL_ID
            init = txn_pb2.TxnInitProducerIdRequest(
                transactional_id="acme.bad2", transaction_timeout_ms=10**9, producer_id=-1
            )
            assert (
                txn.InitProducerId(init, timeout=10).error == ErrorCode.INVALID_TRANSACTION_TIMEOUT
            )
        producer.begin_transaction()
        producer.send(topic, b"kept", partition=0)
        producer.commit_transaction()
        assert wait_for(lambda: stable(bootstrap, topic, 1))
        assert values(read_topic(bootstrap, topic, 1, committed=True)) == [b"kept", b"x"]
    finally:
        producer.close()


def test_half_messages_stay_invisible_until_committed(bootstrap: str) -> None:
    topic = topic_of(bootstrap, "acme.half", partitions=1)
    producer = Producer(bootstrap, producer_group="acme.payments", half_check_interval_ms=60_000)
    try:
        kept = producer.send_half(topic, b"kept", key=b"order-1")
        dropped = producer.send_half(topic, b"dropped", key=b"order-2")
        with Producer(bootstrap) as plain:  # an ordinary record after them
            plain.send(topic, b"plain", partition=0).result()
        for committed in (True, False):  # no reader sees past an open half message
            assert read_topic(bootstrap, topic, 1, committed=committed) == []
        kept.commit()
        dropped.rollback()
        with pytest.raises(MeridianError) as caught:
            dropped.commit()
        assert caught.value.code == ErrorCode.INVALID_TXN_STATE
        for committed in (True, False):  # rolled back: skipped at either level
            assert values(read_topic(bootstrap, topic, 1, committed=committed)) == [
                b"kept",
                b"plain",
            ]
    finally:
        producer.close()


def test_a_producer_answering_check_backs_closes_cleanly(bootstrap: str) -> None:
    """A producer with a check-back stream sends a half message, idles a moment and
    closes: the stream's thread ends without an error (pytest fails a test whose threads
    raise). The stream's loop used to fail at its end when nothing was left running on
    it, which idling makes likely."""
    topic = topic_of(bootstrap, "acme.half-closing", partitions=1)
    for _ in range(5):
        producer = Producer(
            bootstrap, producer_group="acme.closing", check_back=lambda m: HalfOutcome.COMMIT
        )
        try:
            stream = producer._halves._stream  # type: ignore[union-attr]
            assert stream is not None
            assert stream.connected.wait(10)
            producer.send_half(topic, b"x").commit()
            time.sleep(0.3)
        finally:
            producer.close()
        assert not stream._thread.is_alive()


def test_a_raising_check_back_leaves_the_half_message_to_its_default(bootstrap: str) -> None:
    topic = topic_of(bootstrap, "acme.half-default", partitions=1)
    asked = threading.Event()

    def check_back(message: HalfMessage) -> HalfOutcome:
        asked.set()
        raise RuntimeError("the order database is down")

    producer = Producer(
        bootstrap,
        producer_group="acme.refunds",
        check_back=check_back,
        half_check_interval_ms=200,
        half_max_checks=3,
        half_default_outcome="rollback",
    )
    try:
        producer.send_half(topic, b"never", key=b"r-1")
        _, coordinator = coordinator_of(bootstrap, "acme.refunds")
        with grpc.insecure_channel(coordinator) as channel:
            stub = txn_pb2_grpc.TransactionsStub(channel)
            request = txn_pb2.ListHalfMessagesRequest(producer_group="acme.refunds")

            def decided() -> list[txn_pb2.HalfMessage]:
                found = stub.ListHalfMessages(request, timeout=10).half_messages
                return [h for h in found if h.state == txn_pb2.TXN_COMPLETE_ABORT]

            assert wait_for(lambda: bool(decided()), 30)
            (half,) = decided()
        assert (half.resolved_by, half.checks) == ("default", 3)
        assert asked.is_set()
        assert read_topic(bootstrap, topic, 1, committed=False) == []
    finally:
        producer.close()


def metric_sum(brokers: list[BrokerProcess], name: str, **labels: str) -> float:
    """``name`` summed over every broker's /metrics, for the samples with ``labels``."""
    total = 0.0
    for broker in brokers:
        with urllib.request.urlopen(broker.metrics_url, timeout=10) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    total += sample.value
    return total


def test_metrics_count_transactions_markers_and_the_stable_offsets_lag(
    brokers: list[BrokerProcess], bootstrap: str
) -> None:
    topic = topic_of(bootstrap, "acme.txn-metrics")
    counted = ("meridian_txn_completed_total", "meridian_txn_markers_written_total")
    before = {
        (name, outcome): metric_sum(brokers, name, outcome=outcome)
        for name in counted
        for outcome in ("commit", "abort")
    }
    producer = Producer(bootstrap, transactional_id="acme.metrics", linger_ms=1)
    try:
        producer.init_transactions()
        for commit in (True, False):
            producer.begin_transaction()
            send_all(producer, topic, "m")
            producer.flush()
            (producer.commit_transaction if commit else producer.abort_transaction)()
        producer.begin_transaction()
        send_all(producer, topic, "open")
        producer.flush()
        lag = lambda: metric_sum(  # noqa: E731
            brokers, "meridian_partition_last_stable_offset_lag", topic=topic
        )
        assert wait_for(lambda: lag() >= 6, 30)  # the open transaction's records
        assert metric_sum(brokers, "meridian_txn_open", kind="transaction", state="ongoing") >= 1

        def counted_up() -> bool:
            after = {key: metric_sum(brokers, key[0], outcome=key[1]) for key in before}
            completed = [
                after[("meridian_txn_completed_total", o)]
                - before[("meridian_txn_completed_total", o)]
                for o in ("commit", "abort")
            ]
            markers = [
                after[("meridian_txn_markers_written_total", o)]
                - before[("meridian_txn_markers_written_total", o)]
                for o in ("commit", "abort")
            ]
            return completed == [1, 1] and markers == [3, 3]  # one per partition

        assert wait_for(counted_up, 30)
        producer.commit_transaction()
        assert wait_for(lambda: lag() == 0, 30)
    finally:
        producer.close()
