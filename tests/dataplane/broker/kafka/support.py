"""A three-broker cluster with authentication on, serving Kafka's protocol with SASL,
for the Kafka-client tests here and Spark's Kafka source test (``tests/spark``).

The issuer knows the brokers' own client and one service account of ``acme`` and of
``beta``; the brokers exchange SASL/PLAIN credentials at its token endpoint.
``acme.orders`` has partition p led by broker p + 1 (one replica), ``beta.jobs`` one
partition on broker 1.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, common_pb2
from tests.dataplane.broker.auth.support import Caller, caller
from tests.support.brokers import BrokerProcess, start_cluster, stop_all
from tests.support.issuer import TestIssuer

ORDERS = "acme.orders"
PARTITIONS = 3
BETA_TOPIC = "beta.jobs"
BROKER_CLIENT = ("meridian-broker", "broker-s3cret")
ACME_CLIENT = ("acme--cli", "acme-s3cret")
BETA_CLIENT = ("beta--cli", "beta-s3cret")


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
