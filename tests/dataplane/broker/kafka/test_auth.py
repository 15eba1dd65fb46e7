"""Authentication and tenant isolation on the Kafka listener, with librdkafka
(confluent-kafka) against the authenticated cluster of ``support``: SASL/PLAIN with a
service account's client id and secret, OAUTHBEARER with the same tokens the gRPC path
takes, refused secrets and tokens, another tenant's topics answering as Kafka answers an
unauthorized topic, and requests before authentication closing the connection."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from dataplane.client import Consumer as SdkConsumer
from dataplane.client import Producer as SdkProducer
from dataplane.client import TopicPartition as SdkPartition
from tests.dataplane.broker.kafka.support import (
    ACME_CLIENT,
    AUTH_TIMEOUT_MS,
    BETA_CLIENT,
    BETA_TOPIC,
    ORDERS,
    PARTITIONS,
    RawKafka,
    acme_token,
    beta_token,
    grpc_bootstrap,
    kafka_bootstrap,
)
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer

WAIT_S = 30


def plain(brokers: list[BrokerProcess], client: tuple[str, str], **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": kafka_bootstrap(brokers),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": client[0],
        "sasl.password": client[1],
        **more,
    }


def oauthbearer(brokers: list[BrokerProcess], token: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": kafka_bootstrap(brokers),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
        "oauth_cb": lambda _config: (token, time.time() + 600),
        **more,
    }


def produce(config: dict[str, Any], topic: str, records: list[tuple[Any, Any, Any]]) -> list[Any]:
    """Send ``records`` (key, value, headers) one partition each in turn; the delivery
    reports' (error, partition, offset), in order of sending."""
    producer = Producer({"acks": "all", "enable.idempotence": True, **config})
    reports: list[Any] = [None] * len(records)

    def report(i: int) -> Any:
        def done(err: Any, msg: Any) -> None:
            reports[i] = (err, msg.partition(), msg.offset())

        return done

    for i, (key, value, headers) in enumerate(records):
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=headers,
            partition=i % PARTITIONS if topic == ORDERS else 0,
            on_delivery=report(i),
        )
    deadline = time.monotonic() + WAIT_S
    while producer.flush(0.5) and time.monotonic() < deadline:
        pass
    assert None not in reports, "some delivery report never came"
    return reports


def sdk_read(brokers: list[BrokerProcess], token: str, ends: dict[int, int]) -> list[Any]:
    """Every record of ``acme.orders`` up to ``ends`` (partition: end offset), by the SDK."""
    consumer = SdkConsumer(grpc_bootstrap(brokers), auto_offset_reset="earliest", credentials=token)
    records: list[Any] = []
    try:
        consumer.assign([SdkPartition(ORDERS, p) for p in ends])
        deadline = time.monotonic() + WAIT_S
        while any(
            max((r.offset for r in records if r.partition == p), default=-1) < end - 1
            for p, end in ends.items()
        ):
            assert time.monotonic() < deadline, "the SDK did not read what was written"
            records += consumer.poll(timeout_ms=500)
    finally:
        consumer.close()
    return [r for r in records if r.offset < ends[r.partition]]


def kafka_read(config: dict[str, Any], ends: dict[int, int]) -> list[Any]:
    """Every message of ``acme.orders`` up to ``ends``, by librdkafka (assigned, no group)."""
    consumer = Consumer({"group.id": "acme.unused", "enable.auto.commit": False, **config})
    messages: list[Any] = []
    try:
        consumer.assign([TopicPartition(ORDERS, p, 0) for p in ends])
        deadline = time.monotonic() + WAIT_S
        while sum(1 for m in messages if m.offset() < ends[m.partition()]) < sum(ends.values()):
            assert time.monotonic() < deadline, "librdkafka did not read what was written"
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None, message.error()
                messages.append(message)
    finally:
        consumer.close()
    return [m for m in messages if m.offset() < ends[m.partition()]]


def ends_of(brokers: list[BrokerProcess], token: str) -> dict[int, int]:
    consumer = SdkConsumer(grpc_bootstrap(brokers), credentials=token)
    try:
        tps = [SdkPartition(ORDERS, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_end(tps)
        return {tp.partition: consumer.position(tp) for tp in tps}
    finally:
        consumer.close()


# Null and empty keys and values, every byte value, headers with a null value (Kafka's
# own null, not an empty one), a UTF-8 header name.
RECORDS: list[tuple[Any, Any, Any]] = [
    (b"order-1", b'{"total": 12}', [("trace", b"t-1"), ("empty", b"")]),
    (None, b"no key", None),
    (b"order-3", None, None),
    (b"", b"", [("null", None)]),
    (b"order-4", bytes(range(256)), [("pr\u00e9fixe", b"\xff\x00")]),
    *((b"bulk-%d" % i, b"value %d" % i, None) for i in range(25)),
]


def test_plain_records_read_back_by_the_sdk_byte_for_byte(
    kafka_cluster: list[BrokerProcess], issuer: TestIssuer
) -> None:
    token = acme_token(issuer)
    before = ends_of(kafka_cluster, token)
    reports = produce(plain(kafka_cluster, ACME_CLIENT), ORDERS, RECORDS)
    assert [err for err, _, _ in reports] == [None] * len(RECORDS)
    records = sdk_read(kafka_cluster, token, ends_of(kafka_cluster, token))
    by_place = {(r.partition, r.offset): r for r in records}
    for (_, partition, offset), (key, value, headers) in zip(reports, RECORDS, strict=True):
        assert offset >= before[partition]
        got = by_place[(partition, offset)]
        assert (got.key, got.value) == (key, value)
        assert [(k, v) for k, v in got.headers] == [(k, v) for k, v in (headers or [])], (
            f"headers of {key!r}"
        )


def test_sdk_records_read_back_by_librdkafka_byte_for_byte(
    kafka_cluster: list[BrokerProcess], issuer: TestIssuer
) -> None:
    token = acme_token(issuer)
    sent = []
    with SdkProducer(grpc_bootstrap(kafka_cluster), credentials=token, acks="all") as producer:
        for i, (key, value, headers) in enumerate(RECORDS):
            future = producer.send(
                ORDERS, value, key=key, headers=headers, partition=i % PARTITIONS
            )
            sent.append((future.result(timeout=WAIT_S), key, value, headers))
    ends = {p: max(md.offset for md, *_ in sent if md.partition == p) + 1 for p in range(3)}
    messages = kafka_read(plain(kafka_cluster, ACME_CLIENT), ends)
    by_place = {(m.partition(), m.offset()): m for m in messages}
    for md, key, value, headers in sent:
        got = by_place[(md.partition, md.offset)]
        assert (got.key(), got.value()) == (key, value)
        assert (got.headers() or []) == [(k, v) for k, v in (headers or [])]
        assert got.topic() == ORDERS
        assert got.timestamp()[1] == md.timestamp


def test_oauthbearer_takes_the_tokens_grpc_takes(
    kafka_cluster: list[BrokerProcess], issuer: TestIssuer
) -> None:
    reports = produce(oauthbearer(kafka_cluster, acme_token(issuer)), ORDERS, RECORDS[:3])
    assert [err for err, _, _ in reports] == [None] * 3


def test_metadata_lists_only_the_callers_tenants_topics(
    kafka_cluster: list[BrokerProcess], issuer: TestIssuer
) -> None:
    acme = AdminClient(plain(kafka_cluster, ACME_CLIENT)).list_topics(timeout=WAIT_S)
    beta = AdminClient(oauthbearer(kafka_cluster, beta_token(issuer))).list_topics(timeout=WAIT_S)
    assert set(acme.topics) == {ORDERS}
    assert set(beta.topics) == {BETA_TOPIC}
    assert {p.leader for p in acme.topics[ORDERS].partitions.values()} == {1, 2, 3}
    assert set(acme.brokers) == {1, 2, 3}
    ports = {b.port for b in acme.brokers.values()}
    assert ports == {broker.kafka_port for broker in kafka_cluster}


def test_another_tenants_topic_is_not_authorized(
    kafka_cluster: list[BrokerProcess], issuer: TestIssuer
) -> None:
    """beta's records for acme.orders fail with TOPIC_AUTHORIZATION_FAILED (not retried),
    and nothing reaches acme's log."""
    token = acme_token(issuer)
    before = ends_of(kafka_cluster, token)
    reports = produce(plain(kafka_cluster, BETA_CLIENT), ORDERS, RECORDS[:3])
    codes = {err.code() if err else None for err, _, _ in reports}
    assert codes == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert ends_of(kafka_cluster, token) == before
    spy = {"group.id": "beta.spy", "auto.offset.reset": "earliest"}
    consumer = Consumer(plain(kafka_cluster, BETA_CLIENT, **spy))
    try:
        consumer.subscribe([ORDERS])
        deadline = time.monotonic() + 15
        error = None
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            assert message is None or message.error() is not None, "beta read acme's record"
            error = message.error() if message is not None else None
        assert error is not None, "beta's fetch of acme.orders was not refused"
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_another_tenants_topic_answers_like_a_missing_one(
    kafka_cluster: list[BrokerProcess],
) -> None:
    """Metadata for acme.orders (there) and acme.nothing (not there), asked by beta."""
    admin = AdminClient(plain(kafka_cluster, BETA_CLIENT))
    there = admin.list_topics(topic=ORDERS, timeout=WAIT_S).topics[ORDERS]
    missing = admin.list_topics(topic="acme.nothing", timeout=WAIT_S).topics["acme.nothing"]
    assert there.error is not None
    assert there.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert missing.error is not None
    assert missing.error.code() == there.error.code()
    assert (there.partitions, missing.partitions) == ({}, {})


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(lambda b, i: plain(b, (ACME_CLIENT[0], "wrong")), id="plain-wrong-secret"),
        pytest.param(lambda b, i: plain(b, ("nobody", "x")), id="plain-unknown-client"),
        pytest.param(
            lambda b, i: oauthbearer(b, i.token(tenants={"acme": "developer"}, ttl_s=-60)),
            id="oauthbearer-expired",
        ),
        pytest.param(lambda b, i: oauthbearer(b, "not.a.jwt"), id="oauthbearer-garbage"),
    ],
)
def test_refused_credentials_fail_authentication(
    kafka_cluster: list[BrokerProcess], issuer: TestIssuer, config: Any
) -> None:
    errors: list[Any] = []
    admin = AdminClient({**config(kafka_cluster, issuer), "error_cb": errors.append})
    with pytest.raises(KafkaException) as refused:  # librdkafka waits out the timeout
        admin.list_topics(timeout=2)
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, f"no authentication error: {errors}, {refused.value}"
        admin.poll(0.2)


def _metadata_v0() -> bytes:
    client = b"raw"
    body = struct.pack(">hhih", 3, 0, 7, len(client)) + client + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def test_a_request_before_authentication_closes_the_connection(
    kafka_cluster: list[BrokerProcess], issuer: TestIssuer
) -> None:
    broker = kafka_cluster[0]
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10) as raw:
        raw.sendall(_metadata_v0())
        assert raw.recv(4096) == b""
    # The broker still serves everyone else.
    reports = produce(plain(kafka_cluster, ACME_CLIENT), ORDERS, RECORDS[:1])
    assert reports[0][0] is None


@pytest.mark.parametrize("epoch", [-1, 0, 1, 2**31 - 1])
def test_fetch_epochs_tell_another_tenant_nothing(
    kafka_cluster: list[BrokerProcess], epoch: int
) -> None:
    """beta fetching acme.orders (hosted on the broker asked) and acme.nothing (nowhere),
    at any leader epoch: the same TOPIC_AUTHORIZATION_FAILED, so neither the partition's
    existence, its placement nor its epoch shows."""
    from kafka.protocol.consumer import FetchRequest

    def fetch(topic: str) -> int:
        parts = [{"partition": 0, "current_leader_epoch": epoch, "fetch_offset": 0,
                  "log_start_offset": -1, "partition_max_bytes": 1024}]  # fmt: skip
        with RawKafka(kafka_cluster[0].kafka_address, BETA_CLIENT) as raw:
            answer = raw.call(
                FetchRequest, 12, replica_id=-1, max_wait_ms=0, min_bytes=0,
                max_bytes=1024, isolation_level=0, session_id=0, session_epoch=-1,
                topics=[{"topic": topic, "partitions": parts}], forgotten_topics_data=[],
                rack_id="",
            )  # fmt: skip
        (topic_answer,) = answer.responses
        return topic_answer.partitions[0].error_code

    assert fetch(ORDERS) == fetch("acme.nothing") == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_connection_that_does_not_authenticate_in_time_is_closed(
    kafka_cluster: list[BrokerProcess],
) -> None:
    """Silent, or stalled mid-frame: either way closed by the broker at its
    authentication deadline, and the broker serves on."""
    address = kafka_cluster[0].kafka_address
    with RawKafka(address) as silent, RawKafka(address) as stalled:
        stalled.sock.sendall(struct.pack(">ih", 100, 17))  # a handshake's size and key only
        started = time.monotonic()
        assert silent.closed_by_peer(timeout_s=AUTH_TIMEOUT_MS / 1000 + 10)
        assert stalled.closed_by_peer(timeout_s=max(1.0, 15 - (time.monotonic() - started)))
    reports = produce(plain(kafka_cluster, ACME_CLIENT), ORDERS, RECORDS[:1])
    assert reports[0][0] is None
