"""Delayed delivery on three real brokers: records scheduled with the SDK (and with a
Kafka client's ``x-deliver-at``) reach their topic once, never before their time, with
their key, headers and partition; cancelled ones never do; bad input is refused with
nothing stored; and thousands of delays survive SIGKILLed timer and target leaders
without a record lost or delivered twice."""

from __future__ import annotations

import random
import statistics
import threading
import time
import urllib.request
from collections import Counter

import pytest

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.client import Consumer, Producer, TopicPartition
from dataplane.delays import (
    DELAY_MARKER,
    DELAY_PARTITION,
    DELAY_TOPIC,
    DELAYED_FROM,
    DELIVER_AT,
    DLQ_REASON,
    DelayedId,
    attempt_of,
    header,
)
from dataplane.delays import RETRY_OFFSET as RETRY_OFFSET_H
from dataplane.delays import RETRY_PARTITION as RETRY_PARTITION_H
from dataplane.delays import RETRY_TOPIC as RETRY_TOPIC_H
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import BatchBuilder

from .conftest import DEAD_LETTERS, GROUP, ORDERS, RETRY_TOPIC, TIMER, Delays

DAY_MS = 24 * 3600 * 1000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Reader:
    """A consumer of ``acme.orders`` (assigned, no group: the test kills brokers that
    coordinate groups) recording when each delayed record arrived, by its id."""

    def __init__(self, bootstrap: list[str], start: dict[int, int] | None = None) -> None:
        self.arrived: list[tuple[str, int, object]] = []  # (x-delayed-from, received ms, record)
        self._stop = threading.Event()
        self._consumer = Consumer(
            bootstrap,
            auto_offset_reset="latest" if start is None else "earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            retry_backoff_ms=50,
            request_timeout_ms=5_000,
        )
        tps = [TopicPartition(ORDERS, p) for p in range(3)]
        self._consumer.assign(tps)
        for tp in tps:
            if start is not None:
                self._consumer.seek(tp, start[tp.partition])
            else:
                self._consumer.position(tp)  # where "latest" is now
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                records = self._consumer.poll(200)
            except MeridianError:
                continue
            now = _now_ms()
            for record in records:
                found = header(record.headers, DELAYED_FROM)
                self.arrived.append(((found or b"").decode(), now, record))

    def wait_for(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while len(self.arrived) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self.arrived) >= count

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def test_a_delayed_record_arrives_once_with_its_key_headers_and_partition(
    delays: Delays,
) -> None:
    reader = Reader(delays.bootstrap)
    try:
        with Producer(delays.bootstrap, acks="all") as producer:
            sent = producer.send(
                ORDERS,
                b"reminder",
                key=b"order-7",
                headers=[("x-trace-id", b"t1")],
                deliver_after=1.5,
            ).result(15)
            at = producer.send(ORDERS, b"at", partition=2, deliver_at=_now_ms() + 1000).result(15)
            past = producer.send(ORDERS, b"past", partition=0, deliver_at=_now_ms() - 5000)
            past_md = past.result(15)
        assert sent.offset == -1
        assert sent.delayed_id is not None
        assert DelayedId.parse(sent.delayed_id).topic == ORDERS
        assert reader.wait_for(3, 20)
        time.sleep(0.5)  # nothing more comes
        by_id = {arrived[0]: arrived for arrived in reader.arrived}
        assert len(reader.arrived) == 3
        assert set(by_id) == {sent.delayed_id, at.delayed_id, past_md.delayed_id}
        _, received, record = by_id[sent.delayed_id]
        assert received >= sent.deliver_at  # never visible before its time
        assert (record.key, record.value, record.partition) == (
            b"order-7",
            b"reminder",
            sent.partition,
        )
        assert record.headers == (("x-trace-id", b"t1"), (DELAYED_FROM, sent.delayed_id.encode()))
        assert record.timestamp == sent.deliver_at  # stamped with its due time
        assert by_id[at.delayed_id][2].partition == 2
        assert by_id[past_md.delayed_id][2].value == b"past"  # a past time: at once
    finally:
        reader.close()


def test_a_cancelled_record_is_never_delivered(delays: Delays) -> None:
    reader = Reader(delays.bootstrap)
    try:
        with Producer(delays.bootstrap, acks="all") as producer:
            doomed = producer.send(ORDERS, b"cancel me", key=b"k", deliver_after=2).result(15)
            kept = producer.send(ORDERS, b"keep me", key=b"k", deliver_after=2).result(15)
            assert producer.cancel_delayed(doomed.delayed_id) == doomed.deliver_at
            assert producer.cancel_delayed(doomed.delayed_id) == doomed.deliver_at  # twice: fine
            assert reader.wait_for(1, 20)
            with pytest.raises(MeridianError) as late:
                producer.cancel_delayed(kept.delayed_id)
            assert late.value.code == ErrorCode.DELAYED_RECORD_DELIVERED
            place = DelayedId.parse(kept.delayed_id)
            wrong_topic = str(DelayedId("acme.other", place.partition, place.offset))
            with pytest.raises(MeridianError) as missing:
                producer.cancel_delayed(wrong_topic)
            assert missing.value.code == ErrorCode.DELAYED_RECORD_NOT_FOUND
            with pytest.raises(MeridianError) as garbage:
                producer.cancel_delayed("not an id")
            assert garbage.value.code == ErrorCode.INVALID_REQUEST
        time.sleep(1)
        assert [a[2].value for a in reader.arrived] == [b"keep me"]
    finally:
        reader.close()


def test_list_and_describe_show_what_is_pending(delays: Delays) -> None:
    with Producer(delays.bootstrap, acks="all") as producer:
        futures = producer.send_batch(
            ORDERS, [(b"k%d" % i, b"v%d" % i) for i in range(5)], deliver_after=3600
        )
        ids = [md.delayed_id for md in futures.result(15)]
        listed = producer._delays.scheduled("acme", topic=ORDERS, value_bytes=10)
        assert {r.id for r in listed} >= set(ids)
        mine = [r for r in listed if r.id in ids]
        assert sorted(r.value for r in mine) == [b"v%d" % i for i in range(5)]
        pending = producer._delays.pending("acme")
        assert sum(p.pending_records for p in pending) >= 5
        assert all(p.ready for p in pending)
        soon = producer.send(ORDERS, b"soon", key=b"k0", deliver_after=1800).result(15)
        timer = DelayedId.parse(soon.delayed_id).partition
        states = {p.partition: p for p in producer._delays.pending("acme")}
        assert states[timer].next_deliver_at_ms == soon.deliver_at
        for delayed_id in [*ids, soon.delayed_id]:
            producer.cancel_delayed(delayed_id)
        listed = producer._delays.scheduled("acme", topic=ORDERS)
        assert not {r.id for r in listed} & {*ids, soon.delayed_id}
        states = {p.partition: p for p in producer._delays.pending("acme")}
        assert states[timer].next_deliver_at_ms != soon.deliver_at  # a cancelled one is not next
    leader = delays.brokers[delays.leader(TIMER, 0)]
    with urllib.request.urlopen(leader.metrics_url, timeout=10) as answer:
        metrics = answer.read().decode()
    for name in (
        'meridian_delay_pending_records{partition="0",tenant="acme"}',
        'meridian_delay_cancelled_records_total{tenant="acme"}',
        "meridian_delay_lateness_seconds_bucket",
        "meridian_delay_timer_log_demands",
    ):
        assert name in metrics, name


def _timer_record(**headers: bytes) -> bytes:
    builder = BatchBuilder()
    builder.append(b"v", headers=list(headers.items()))
    return builder.build()


def _scheduling(
    deliver_at: bytes | None = b"now",
    topic: bytes | None = ORDERS.encode(),
    partition: bytes | None = b"0",
    **more: bytes,
) -> dict[str, bytes]:
    """A timer record's headers: a delivery time (b"now" for the current one), a topic
    and a partition, each left out when None."""
    if deliver_at == b"now":
        deliver_at = b"%d" % _now_ms()
    found = {DELIVER_AT: deliver_at, DELAY_TOPIC: topic, DELAY_PARTITION: partition}
    return {k: v for k, v in found.items() if v is not None} | more


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        (_scheduling(deliver_at=b"soon"), "INVALID_DELAY"),
        (_scheduling(deliver_at=None), "INVALID_DELAY"),
        (_scheduling(deliver_at=b"%d" % (_now_ms() + 40 * DAY_MS)), "INVALID_DELAY"),
        (_scheduling(topic=None), "INVALID_RECORD"),
        (_scheduling(topic=b"other.orders"), "INVALID_RECORD"),
        (_scheduling(partition=b"x"), "INVALID_RECORD"),
        (_scheduling(**{DELAY_MARKER: b"move"}), "INVALID_RECORD"),
    ],
)
def test_bad_timer_records_are_refused_and_nothing_is_stored(
    delays: Delays, headers: dict[str, bytes], code: str
) -> None:
    leader = delays.brokers[delays.leader(TIMER, 0)]
    request = broker_pb2.ProduceRequest(
        acks=-1,
        partitions=[
            broker_pb2.PartitionRecords(topic=TIMER, partition=0, records=_timer_record(**headers))
        ],
    )
    with leader.channel() as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        before = _end(stub)
        (result,) = stub.Produce(request, timeout=15).results
        assert ErrorCode.Name(result.error) == code, result
        assert _end(stub) == before


def _end(stub: broker_pb2_grpc.BrokerStub) -> int:
    request = broker_pb2.ListOffsetsRequest(
        partitions=[broker_pb2.ListOffsetsPartition(topic=TIMER, partition=0, timestamp=-1)]
    )
    return stub.ListOffsets(request, timeout=15).results[0].offset


def test_delays_out_of_bounds_are_refused_by_the_sdk(delays: Delays) -> None:
    with Producer(delays.bootstrap) as producer:
        for bad in ({"deliver_after": 0.5}, {"deliver_after": 31 * 86400},
                    {"deliver_at": _now_ms() + 31 * DAY_MS}):  # fmt: skip
            with pytest.raises(MeridianError) as refused:
                producer.send(ORDERS, b"v", **bad)
            assert refused.value.code == ErrorCode.INVALID_DELAY
        with pytest.raises(MeridianError) as refused:
            producer.send(ORDERS, b"v", headers=[(DELIVER_AT, b"tomorrow")])
        assert refused.value.code == ErrorCode.INVALID_DELAY
        with pytest.raises(MeridianError) as refused:  # checked as an immediate send's
            producer.send(ORDERS, b"v", deliver_after=5, timestamp_ms=-1)
        assert refused.value.code == ErrorCode.INVALID_TIMESTAMP
        with pytest.raises(TypeError):
            producer.send(ORDERS, b"v", deliver_after=5, timestamp_ms="now")  # type: ignore[arg-type]


def test_a_kafka_client_delays_with_the_x_deliver_at_header(delays: Delays) -> None:
    from confluent_kafka import Producer as KafkaProducer

    kafka = ",".join(f"127.0.0.1:{b.kafka_port}" for b in delays.brokers.values())
    reader = Reader(delays.bootstrap)
    scheduled_before = _scheduled_total(delays)
    try:
        due = _now_ms() + 1500
        plain = KafkaProducer(
            {"bootstrap.servers": kafka, "enable.idempotence": False, "compression.type": "lz4"}
        )
        for i in range(3):
            plain.produce(ORDERS, b"now%d" % i, key=b"c", partition=1)
        plain.produce(ORDERS, b"later", key=b"c", partition=1,
                      headers=[(DELIVER_AT, str(due).encode())])  # fmt: skip
        assert plain.flush(15) == 0
        assert reader.wait_for(4, 20)
        values = [a[2].value for a in reader.arrived]
        assert sorted(values[:3]) == [b"now0", b"now1", b"now2"]
        assert values[3] == b"later"
        assert reader.arrived[3][1] >= due
        assert reader.arrived[3][2].partition == 1
        assert _scheduled_total(delays) - scheduled_before == 1  # counted once, when stored
        errors: list[object] = []
        strict = KafkaProducer({"bootstrap.servers": kafka, "enable.idempotence": True})
        strict.produce(ORDERS, b"refused", headers=[(DELIVER_AT, str(due).encode())],
                       on_delivery=lambda err, _: errors.append(err))  # fmt: skip
        strict.flush(15)
        assert errors
        assert errors[0] is not None
        assert "INVALID_RECORD" in str(errors[0])
    finally:
        reader.close()


def _scheduled_total(delays: Delays) -> float:
    """meridian_delay_scheduled_records_total of tenant acme, summed over the brokers."""
    total = 0.0
    for broker in delays.brokers.values():
        with urllib.request.urlopen(broker.metrics_url, timeout=10) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith('meridian_delay_scheduled_records_total{tenant="acme"}'):
                    total += float(line.split()[-1])
    return total


def _end_of(delays: Delays, topic: str, partition: int) -> int:
    leader = delays.brokers[delays.leader(topic, partition)]
    request = broker_pb2.ListOffsetsRequest(
        partitions=[broker_pb2.ListOffsetsPartition(topic=topic, partition=partition, timestamp=-1)]
    )
    with leader.channel() as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        return stub.ListOffsets(request, timeout=15).results[0].offset


def test_retries_come_back_to_their_group_alone_then_go_to_dead_letters(delays: Delays) -> None:
    """A record retried by ``acme.billing`` (max_attempts 3) comes back to it twice, with
    x-attempt and its original place, then lands in the dead-letter topic with the
    reason and its attempts; the group ``acme.audit`` reading the same topic sees it once; a group
    without a retry policy cannot retry."""
    marker = b"job-%d" % _now_ms()
    with Producer(delays.bootstrap, acks="all") as producer:
        original = producer.send(ORDERS, marker, key=b"job").result(15)
    billing = Consumer(delays.bootstrap, group_id=GROUP, auto_offset_reset="earliest",
                       fetch_max_wait_ms=100)  # fmt: skip
    audit = Consumer(delays.bootstrap, group_id="acme.audit", auto_offset_reset="earliest",
                     fetch_max_wait_ms=100)  # fmt: skip
    deliveries = []
    try:
        billing.subscribe([ORDERS])
        audit.subscribe([ORDERS])
        assert RETRY_TOPIC in billing.reading()
        deadline = time.monotonic() + 40
        while len(deliveries) < 3 and time.monotonic() < deadline:
            for record in billing.poll(200):
                if record.value != marker:
                    continue
                deliveries.append(record)
                if record.attempt == 1:
                    billing.retry_later(record, 1, reason="the bank was down")
                else:
                    billing.nack(record, reason=f"attempt {record.attempt} failed")
            billing.commit()
        audit_seen = _values(audit, marker, 3)
        with pytest.raises(MeridianError) as no_policy:
            audit.retry_later(deliveries[0], 1)
        assert no_policy.value.code == ErrorCode.RETRY_POLICY_NOT_FOUND
    finally:
        billing.close()
        audit.close()
    assert [(r.topic, r.attempt) for r in deliveries] == [
        (ORDERS, 1),
        (RETRY_TOPIC, 2),
        (RETRY_TOPIC, 3),
    ]
    origin = (ORDERS.encode(), str(original.partition).encode(), str(original.offset).encode())
    for retried in deliveries[1:]:
        assert retried.key == b"job"
        found = tuple(
            header(retried.headers, h) for h in (RETRY_TOPIC_H, RETRY_PARTITION_H, RETRY_OFFSET_H)
        )
        assert found == origin
    assert audit_seen == [marker]
    with Consumer(delays.bootstrap, auto_offset_reset="earliest") as reader:
        reader.assign([TopicPartition(DEAD_LETTERS, 0)])
        dead = [r for r in _drain(reader, 20) if r.value == marker]
    assert len(dead) == 1
    assert header(dead[0].headers, DLQ_REASON) == b"3 attempts: attempt 3 failed"
    # The dead letter says how many deliveries it had; read outside the retry topic it is
    # a first delivery to its reader (headers count only on the group's own retry topic).
    assert attempt_of(dead[0].headers) == 3
    assert dead[0].attempt == 1


def _drain(consumer: Consumer, timeout_s: float) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = consumer.poll(300)
        if not batch and got:
            return got
        got += batch
    return got


def _values(consumer: Consumer, marker: bytes, timeout_s: float) -> list[bytes]:
    return [r.value for r in _drain(consumer, timeout_s) if r.value == marker]


def test_thousands_of_delays_survive_killed_leaders_delivered_once_never_early(
    delays: Delays,
) -> None:
    """3,000 records due over 16 s; meanwhile a timer partition's leader is SIGKILLed
    mid-move (the new leader resumes from the log and resends the last intent), then a
    target partition's leader, then every broker at once (restarted); each record
    arrives exactly once, none before its time. The lateness is printed."""
    start = {p: _end_of(delays, ORDERS, p) for p in range(3)}
    reader = Reader(delays.bootstrap, start)
    rng = random.Random(7)
    scheduled: dict[str, int] = {}
    first_due = _now_ms() + 2000
    try:
        with Producer(delays.bootstrap, acks="all", linger_ms=2, retry_backoff_ms=50,
                      request_timeout_ms=5_000) as producer:  # fmt: skip
            calls = []
            for chunk in range(300):
                due = first_due + rng.randrange(16_000)
                records = [(b"k%d" % rng.randrange(50), b"%d-%d" % (chunk, i)) for i in range(10)]
                calls.append(producer.send_batch(ORDERS, records, deliver_at=due))
            for call in calls:
                for md in call.result(30):
                    scheduled[md.delayed_id] = md.deliver_at
        faults = [  # while records are due, each once the previous one is healed
            (1500, "the leader of timer partition 0", lambda: delays.kill(delays.leader(TIMER, 0))),
            (7000, "the leader of acme.orders-1", lambda: delays.kill(delays.leader(ORDERS, 1))),
            (12000, "every broker", delays.restart_all),
        ]
        healing: threading.Thread | None = None
        for at, what, fault in faults:
            if healing is not None:
                healing.join(60)
            time.sleep(max(0.0, (first_due + at - _now_ms()) / 1000))
            fault()
            print(f"killed {what} at +{_now_ms() - first_due} ms, {len(reader.arrived)} arrived")
            healing = threading.Thread(target=delays.heal)
            healing.start()
        if healing is not None:
            healing.join(60)
        assert reader.wait_for(len(scheduled), 90), (len(reader.arrived), len(scheduled))
        time.sleep(1.0)
    finally:
        reader.close()
        delays.heal()
    ids = Counter(a[0] for a in reader.arrived)
    assert set(ids) == set(scheduled), set(scheduled) ^ set(ids)
    doubled = [(i, r.partition, r.offset) for i, _, r in reader.arrived if ids[i] > 1]
    assert not doubled, sorted(doubled)[:10]
    late = sorted(received - scheduled[i] for i, received, _ in reader.arrived)
    assert late[0] >= 0  # never before its time
    print(
        f"lateness of {len(late)} records: p50 {statistics.median(late)} ms, "
        f"p99 {late[int(len(late) * 0.99)]} ms, max {late[-1]} ms"
    )
