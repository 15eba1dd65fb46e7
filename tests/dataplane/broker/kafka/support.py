"""A three-broker cluster with authentication on, serving Kafka's protocol with SASL,
for the Kafka-client tests here and Spark's Kafka source test (``tests/spark``).

The issuer knows the brokers' own client and one service account of ``acme`` and of
``beta``; the brokers exchange SASL/PLAIN credentials at its token endpoint.
``acme.orders`` has partition p led by broker p + 1 (one replica), ``beta.jobs`` one
partition on broker 1.
"""

from __future__ import annotations

import importlib
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, common_pb2
from dataplane.broker.kafka.wire import make
from tests.dataplane.broker.auth.support import Caller, caller
from tests.support.brokers import BrokerProcess, start_cluster, stop_all
from tests.support.issuer import TestIssuer

ORDERS = "acme.orders"
PARTITIONS = 3
BETA_TOPIC = "beta.jobs"
BROKER_CLIENT = ("meridian-broker", "broker-s3cret")
ACME_CLIENT = ("acme--cli", "acme-s3cret")
BETA_CLIENT = ("beta--cli", "beta-s3cret")
AUTH_TIMEOUT_MS = 3000  # the brokers' kafka_auth_timeout_ms


def add_clients(issuer: TestIssuer) -> TestIssuer:
    issuer.add_client(*BROKER_CLIENT, internal=True)
    issuer.add_client(*ACME_CLIENT, tenants={"acme": "developer"})
    issuer.add_client(*BETA_CLIENT, tenants={"beta": "developer"})
    return issuer


def acme_token(issuer: TestIssuer) -> str:
    return issuer.token(tenants={"acme": "developer"}, client_id=ACME_CLIENT[0])


def beta_token(issuer: TestIssuer) -> str:
    return issuer.token(tenants={"beta": "developer"}, client_id=BETA_CLIENT[0])


@contextmanager
def auth_cluster(root: Path, issuer: TestIssuer) -> Iterator[list[BrokerProcess]]:
    """The cluster, its topics made and led; it is stopped on leaving."""
    secret_file = root / "broker-secret"
    secret_file.write_text(BROKER_CLIENT[1])
    secret_file.chmod(0o600)
    args = [
        *issuer.broker_args(),
        "--token-url", issuer.token_url,
        "--client-id", BROKER_CLIENT[0],
        "--client-secret-file", str(secret_file),
        "--sasl-plain-token-url", issuer.token_url,
    ]  # fmt: skip
    args += ["--kafka-auth-timeout-ms", str(AUTH_TIMEOUT_MS)]
    brokers = start_cluster(root, 3, extra_args=args, kafka=True)
    try:
        token = issuer.internal_token()
        for partition in range(PARTITIONS):
            create_partition(brokers[partition], token, ORDERS, partition)
        create_partition(brokers[0], token, BETA_TOPIC, 0)
        wait_for_leaders(brokers, token, {ORDERS: PARTITIONS, BETA_TOPIC: 1})
        yield brokers
    finally:
        stop_all(brokers)


def create_partition(broker: BrokerProcess, token: str, topic: str, partition: int) -> None:
    config = common_pb2.PartitionConfig()
    spec = admin_pb2.PartitionSpec(topic=topic, partition=partition, config=config)
    with caller(broker.address, token) as c:
        response = c.admin.CreatePartitions(
            admin_pb2.CreatePartitionsRequest(partitions=[spec]), timeout=15
        )
    assert all(r.error == 0 for r in response.results), response


def wait_for_leaders(
    brokers: list[BrokerProcess], token: str, topics: dict[str, int], timeout_s: float = 30
) -> None:
    """Until every broker's Metadata names a leader for each partition of ``topics``."""
    deadline = time.monotonic() + timeout_s
    for broker in brokers:
        with caller(broker.address, token) as c:
            while _led(c, topics) < sum(topics.values()):
                assert time.monotonic() < deadline, f"{broker!r} does not see every partition"
                time.sleep(0.05)


def _led(c: Caller, topics: dict[str, int]) -> int:
    request = broker_pb2.MetadataRequest(topics=list(topics))
    response = c.broker.Metadata(request, timeout=10)
    return sum(1 for t in response.topics for p in t.partitions if p.leader_id > 0)


def kafka_bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(broker.kafka_address for broker in brokers)


def grpc_bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(broker.address for broker in brokers)


class RawKafka:
    """One Kafka connection spoken by hand: requests built and answers read with
    kafka-python's protocol classes (Kafka's message schemas), SASL/PLAIN when given a
    client, so a test can send exactly the request it means."""

    def __init__(self, address: str, client: tuple[str, str] | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self._next_id = 0
        if client is not None:
            self.call(SaslHandshakeRequest, 1, mechanism="PLAIN")
            auth = f"\x00{client[0]}\x00{client[1]}".encode()
            answer = self.call(SaslAuthenticateRequest, 1, auth_bytes=auth)
            assert answer.error_code == 0, answer

    def send(self, request_class: Any, version: int, **fields: Any) -> int:
        self._next_id += 1
        request = make(request_class, fields, version)
        request.with_header(correlation_id=self._next_id, client_id="raw")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        return self._next_id

    def receive(self, response_class: Any, version: int) -> Any:
        (size,) = struct.unpack(">i", self._exactly(4))
        return response_class.decode(self._exactly(size), version=version, header=True)

    def call(self, request_class: Any, version: int, **fields: Any) -> Any:
        self.send(request_class, version, **fields)
        return self.receive(_response_of(request_class), version)

    def closed_by_peer(self, timeout_s: float = 15) -> bool:
        """Whether the broker closes the connection (within ``timeout_s``) with nothing
        more said."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _response_of(request_class: Any) -> Any:
    module = importlib.import_module(request_class.__module__)
    return getattr(module, request_class.__name__.replace("Request", "Response"))


def one_batch(value: bytes = b"v") -> bytes:
    """A RecordBatch v2 holding one record, built by kafka-python."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=None, value=value, headers=[])
    builder.close()
    return bytes(builder.buffer())
