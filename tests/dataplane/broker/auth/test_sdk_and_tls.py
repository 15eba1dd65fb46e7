"""The SDK end to end against brokers with authentication on, over TLS, and brokers
calling each other with their own client credentials."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from typer.testing import CliRunner

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.cli import app
from dataplane.client import Admin, Consumer, Producer, TopicPartition
from dataplane.client.auth import ClientCredentials
from dataplane.client.connection import ChannelSecurity
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from tests.support.brokers import BrokerProcess, free_ports, start_cluster, stop_all
from tests.support.issuer import TestIssuer
from tests.support.tls import TlsFiles, make_tls_files

from .support import caller, create_topic

RECORDS = 200


def _consume_all(consumer: Consumer, expected: int, timeout_s: float = 30.0) -> list[bytes]:
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < expected and time.monotonic() < deadline:
        seen += [r.value for r in consumer.poll(timeout_ms=200)]
    return seen


def test_a_service_account_produces_and_consumes_with_client_credentials(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    issuer.add_client("acme--app", "s3cret", tenants={"acme": "developer"})
    credentials = ClientCredentials(issuer.token_url, "acme--app", "s3cret")
    values = [f"v{i}".encode() for i in range(RECORDS)]
    with Producer(secured_broker.address, credentials=credentials) as producer:
        for value in values:
            producer.send("acme.orders", value)
        producer.flush()
    consumer = Consumer(
        secured_broker.address,
        group_id="acme.sdk",
        auto_offset_reset="earliest",
        credentials=credentials,
    )
    try:
        consumer.subscribe(["acme.orders"])
        seen = _consume_all(consumer, RECORDS)
    finally:
        consumer.close()
    assert set(values) <= set(seen)


def test_the_sdk_surfaces_a_refusal_as_a_typed_error(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    token = issuer.token(tenants={"acme": "developer"})
    with (
        Producer(secured_broker.address, credentials=token, retries=0) as producer,
        pytest.raises(MeridianError) as raised,
    ):
        producer.send("beta.secret", b"nope")  # its metadata is refused: fatal at once
    assert raised.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_wrong_client_credentials_fail_with_unauthenticated(issuer: TestIssuer) -> None:
    with pytest.raises(MeridianError) as raised:
        ClientCredentials(issuer.token_url, "acme--app", "wrong").token()
    assert raised.value.code == ErrorCode.UNAUTHENTICATED


def test_client_credentials_reuse_a_token_until_it_nears_expiry(issuer: TestIssuer) -> None:
    issuer.add_client("acme--reuse", "s", tenants={"acme": "viewer"})
    credentials = ClientCredentials(issuer.token_url, "acme--reuse", "s")
    first = credentials.token()
    assert credentials.token() == first
    assert credentials.cached() == first


@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    return make_tls_files(tmp_path / "tls")


@pytest.fixture
def tls_broker(tmp_path: Path, tls_files: TlsFiles) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "broker", extra_args=tls_files.broker_args())
    try:
        yield process.start()
    finally:
        process.kill()


def test_a_client_trusting_the_ca_produces_and_consumes_over_tls(
    tls_broker: BrokerProcess, tls_files: TlsFiles
) -> None:
    ca = tls_files.ca_file
    with Admin(tls_broker.address, tls=ca) as admin:
        admin.create_topic("acme.tls", 1)
    with Producer(tls_broker.address, tls=ca) as producer:
        producer.send("acme.tls", b"over tls").result(timeout=30)
    consumer = Consumer(tls_broker.address, auto_offset_reset="earliest", tls=str(ca))
    try:
        consumer.assign([TopicPartition("acme.tls", 0)])
        assert _consume_all(consumer, 1) == [b"over tls"]
    finally:
        consumer.close()


def test_a_plaintext_client_is_refused_by_a_tls_listener(tls_broker: BrokerProcess) -> None:
    with caller(tls_broker.address, None) as plain, pytest.raises(grpc.RpcError) as raised:
        plain.broker.Metadata(broker_pb2.MetadataRequest(), timeout=5)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE


def test_brokers_call_each_other_with_their_own_credentials_over_tls(
    tmp_path: Path, issuer: TestIssuer
) -> None:
    files = make_tls_files(tmp_path / "tls")
    secret_file = tmp_path / "broker-secret"
    secret_file.write_text("broker-s3cret\n")
    issuer.add_client("meridian-broker", "broker-s3cret", internal=True)
    args = [
        *issuer.broker_args(),
        *files.broker_args(),
        "--token-url",
        issuer.token_url,
        "--client-id",
        "meridian-broker",
        "--client-secret-file",
        str(secret_file),
    ]
    brokers = start_cluster(tmp_path, 2, extra_args=args)
    try:
        with caller(brokers[1].address, issuer.internal_token(), tls=files.ca_file) as second:
            create_topic(second, "acme.remote")
        token = issuer.token(tenants={"acme": "viewer"})
        with caller(brokers[0].address, token, tls=files.ca_file) as first:
            deadline = time.monotonic() + 15
            leaders: dict[int, int] = {}
            while time.monotonic() < deadline and not leaders:
                response = first.broker.Metadata(
                    broker_pb2.MetadataRequest(topics=["acme.remote"]), timeout=10
                )
                leaders = {p.partition: p.leader_id for t in response.topics for p in t.partitions}
                time.sleep(0.1)
        assert leaders == {0: 2}, brokers[0].log_text()[-3000:]
    finally:
        stop_all(brokers)


def test_the_cli_takes_a_token_or_client_credentials(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    runner = CliRunner()
    base = ["--bootstrap", secured_broker.address]
    anonymous = runner.invoke(app, [*base, "topics", "list"])
    assert anonymous.exit_code == 1
    assert "UNAUTHENTICATED" in anonymous.stderr
    token = issuer.token(tenants={"acme": "viewer"})
    listed = runner.invoke(app, [*base, "--token", token, "topics", "list"])
    assert listed.exit_code == 0, listed.stderr
    assert "acme.orders" in listed.stdout
    assert "beta" not in listed.stdout
    issuer.add_client("acme--cli", "cli-secret", tenants={"acme": "developer"})
    flags = ["--token-url", issuer.token_url, "--client-id", "acme--cli"]
    produced = runner.invoke(
        app,
        [*base, *flags, "--client-secret", "cli-secret", "produce", "acme.audit"],
        input="from the cli\n",
    )
    assert produced.exit_code == 0, produced.stderr
    half = runner.invoke(app, [*base, *flags, "topics", "list"])
    assert half.exit_code == 1
    assert "--client-secret" in half.stderr


def test_refused_client_credentials_fail_calls_as_unauthenticated(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    credentials = ClientCredentials(issuer.token_url, "acme--nobody", "wrong")
    with ChannelSecurity.of(credentials).channel(secured_broker.address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.Metadata(broker_pb2.MetadataRequest(), timeout=10)
    assert error_from_rpc(raised.value).code == ErrorCode.UNAUTHENTICATED
    with (
        Producer(secured_broker.address, credentials=credentials, max_block_ms=2000) as producer,
        pytest.raises(MeridianError) as refused,
    ):
        producer.send("acme.orders", b"x")
    assert refused.value.code == ErrorCode.UNAUTHENTICATED


def test_a_broker_whose_issuer_is_unreachable_still_answers_clients(
    tmp_path: Path, issuer: TestIssuer
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("s")
    (dead_port,) = free_ports(1)
    args = [
        *issuer.broker_args(),
        "--token-url", f"http://127.0.0.1:{dead_port}/token",
        "--client-id", "meridian-broker",
        "--client-secret-file", str(secret_file),
    ]  # fmt: skip
    brokers = start_cluster(tmp_path, 2, extra_args=args)
    try:
        token = issuer.token(tenants={"acme": "viewer"})
        with caller(brokers[0].address, token) as c:
            for _ in range(3):  # each waits for a round of (failing) peer calls
                response = c.broker.Metadata(broker_pb2.MetadataRequest(), timeout=10)
                assert sorted(b.id for b in response.brokers) == [1, 2]
    finally:
        stop_all(brokers)


def test_client_credentials_refresh_and_ride_out_an_issuer_outage() -> None:
    now = [0.0]
    with TestIssuer() as own:
        own.add_client("acme--app", "s", tenants={"acme": "developer"})
        credentials = ClientCredentials(own.token_url, "acme--app", "s", clock=lambda: now[0])
        first = credentials.token()
        now[0] = 580.0  # within the refresh margin of the 600 s token: a new one is fetched
        second = credentials.token()
        assert second != first
        now[0] = 1160.0
    # The issuer is gone: the token in hand serves until it expires, then calls fail.
    assert credentials.token() == second
    now[0] = 1181.0
    with pytest.raises(MeridianError) as raised:
        credentials.token()
    assert raised.value.code == ErrorCode.BROKER_NOT_AVAILABLE
