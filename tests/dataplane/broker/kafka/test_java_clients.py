"""Apache Kafka's own command-line tools (real JVMs, ``tests.support.kafka_jvm``) against
the Kafka listeners of a three-broker cluster with authentication on (``support``): the
console producer and consumer and the consumer-groups command, signed in with SASL/PLAIN
as service accounts of two tenants.

Kafka's tools exit with 0 even when they fail (refused credentials, an authorization
error, a send that failed), so the tests read what they print.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter

import pytest
from kafka.partitioner.default import murmur2

from dataplane.client import Consumer, Producer, TopicPartition
from tests.dataplane.broker.kafka.support import (
    ACME_CLIENT,
    BETA_CLIENT,
    BETA_TOPIC,
    ORDERS,
    PARTITIONS,
    acme_token,
    beta_token,
    grpc_bootstrap,
    kafka_bootstrap,
)
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer
from tests.support.kafka_jvm import (
    CONSOLE_CONSUMER,
    CONSOLE_PRODUCER,
    CONSUMER_GROUPS,
    run_kafka_tool,
    sasl_plain_properties,
)

GROUP = "acme.cli"
BETA_GROUP = "beta.jobs"
# Keyed lines (key TAB value), UTF-8 among them; murmur2 puts 10, 8 and 12 of the keys
# in partitions 0, 1 and 2.
LINES = [(b"order-%02d" % i, "total %d.50 \u20ac".encode() % i) for i in range(30)]
TOOL_TIMEOUT_S = 90
# The group protocol of JoinGroup/SyncGroup, the one the listener speaks (a Kafka 4 client
# may also try KIP-848's ConsumerGroupHeartbeat).
CLASSIC = {"group.protocol": "classic"}


def partition_of(key: bytes) -> int:
    """Where Kafka's default partitioner puts ``key`` (kafka-python's murmur2)."""
    return (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


def counts() -> dict[int, int]:
    """The lines each partition holds."""
    return dict(Counter(partition_of(key) for key, _ in LINES))


def said(done: subprocess.CompletedProcess[bytes]) -> str:
    """What a tool printed (stdout, then stderr), for assertion messages."""
    return (done.stdout + done.stderr).decode(errors="replace")


def tool(
    main_class: str,
    brokers: list[BrokerProcess],
    args: list[str],
    client: tuple[str, str] = ACME_CLIENT,
    *,
    settings: dict[str, str] | None = None,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run a Kafka tool against the cluster, signed in (SASL/PLAIN) as ``client``, with
    client ``settings`` besides."""
    return run_kafka_tool(
        main_class,
        ["--bootstrap-server", kafka_bootstrap(brokers), *args],
        input=input,
        timeout_s=TOOL_TIMEOUT_S,
        properties=sasl_plain_properties(*client) | (settings or {}),
    )


@pytest.fixture(scope="module")
def produced(kafka_cluster: list[BrokerProcess]) -> subprocess.CompletedProcess[bytes]:
    """The console producer's run writing ``LINES`` to ``acme.orders``."""
    lines = b"".join(key + b"\t" + value + b"\n" for key, value in LINES)
    args = ["--topic", ORDERS, "--reader-property", "parse.key=true"]
    return tool(CONSOLE_PRODUCER, kafka_cluster, args, settings={"acks": "all"}, input=lines)


@pytest.fixture(scope="module")
def consumed(
    kafka_cluster: list[BrokerProcess], produced: subprocess.CompletedProcess[bytes]
) -> list[tuple[int, int, bytes, bytes]]:
    """(partition, offset, key, value) of what the console consumer of group ``acme.cli``
    printed, reading ``acme.orders`` from the beginning up to ``len(LINES)`` records; it
    commits its positions as it leaves."""
    args = ["--topic", ORDERS, "--group", GROUP, "--from-beginning"]
    args += ["--max-messages", str(len(LINES)), "--timeout-ms", "60000"]
    for name in ("print.partition", "print.offset", "print.key"):
        args += ["--formatter-property", f"{name}=true"]
    done = tool(CONSOLE_CONSUMER, kafka_cluster, args, settings=CLASSIC)
    assert f"Processed a total of {len(LINES)} messages".encode() in done.stderr, said(done)
    return [_printed(line) for line in done.stdout.splitlines()]


def _printed(line: bytes) -> tuple[int, int, bytes, bytes]:
    partition, offset, key, value = line.split(b"\t", 3)
    return (
        int(partition.removeprefix(b"Partition:")),
        int(offset.removeprefix(b"Offset:")),
        key,
        value,
    )


@pytest.fixture(scope="module")
def beta_group(kafka_cluster: list[BrokerProcess], issuer: TestIssuer) -> str:
    """Group ``beta.jobs`` of tenant ``beta``, joined through the SDK and left with its
    commit of ``beta.jobs``."""
    token = beta_token(issuer)
    bootstrap = grpc_bootstrap(kafka_cluster)
    with Producer(bootstrap, credentials=token) as producer:
        producer.send(BETA_TOPIC, b"job").result(timeout=30)
    with Consumer(
        bootstrap, group_id=BETA_GROUP, auto_offset_reset="earliest", credentials=token
    ) as consumer:
        consumer.subscribe([BETA_TOPIC])
        assert consumer.poll(timeout_ms=30_000), "beta's consumer read nothing"
    return BETA_GROUP


def group_rows(output: bytes) -> list[dict[str, str]]:
    """The rows of a ``--describe`` table, by column name."""
    lines = [line.split() for line in output.decode().splitlines() if line.strip()]
    header = next((i for i, cells in enumerate(lines) if cells[:2] == ["GROUP", "TOPIC"]), None)
    assert header is not None, f"no table in:\n{output.decode()}"
    return [dict(zip(lines[header], cells, strict=True)) for cells in lines[header + 1 :]]


# -- tests ----------------------------------------------------------------------------------
def test_console_producer_lines_land_at_their_keys_partitions(
    kafka_cluster: list[BrokerProcess],
    produced: subprocess.CompletedProcess[bytes],
    issuer: TestIssuer,
) -> None:
    """Read back through the SDK: every line once, in the partition Kafka's partitioner
    chose for its key, in the order written."""
    assert produced.returncode == 0
    assert b"ERROR" not in produced.stderr, said(produced)
    consumer = Consumer(
        grpc_bootstrap(kafka_cluster), auto_offset_reset="earliest", credentials=acme_token(issuer)
    )
    try:
        consumer.assign([TopicPartition(ORDERS, p) for p in range(PARTITIONS)])
        records = []
        deadline = time.monotonic() + 30
        while len(records) < len(LINES) and time.monotonic() < deadline:
            records += consumer.poll(timeout_ms=500)
    finally:
        consumer.close()
    stored = sorted((r.partition, r.offset, r.key, r.value) for r in records)
    expected = [(partition_of(key), key, value) for key, value in LINES]
    assert [(p, k, v) for p, _, k, v in stored] == sorted(expected, key=lambda e: e[0])
    for partition, count in counts().items():
        assert [o for p, o, _, _ in stored if p == partition] == list(range(count))


def test_console_consumer_in_a_group_reads_exactly_the_lines_written(
    consumed: list[tuple[int, int, bytes, bytes]],
) -> None:
    assert sorted((key, value) for _, _, key, value in consumed) == sorted(LINES)
    assert all(partition == partition_of(key) for partition, _, key, _ in consumed)


def test_describe_shows_the_groups_committed_offsets_at_the_log_end_and_no_lag(
    kafka_cluster: list[BrokerProcess], consumed: list[tuple[int, int, bytes, bytes]]
) -> None:
    done = tool(CONSUMER_GROUPS, kafka_cluster, ["--describe", "--group", GROUP])
    assert b"Error" not in done.stdout + done.stderr, said(done)
    rows = group_rows(done.stdout)
    assert {row["GROUP"] for row in rows} == {GROUP}
    assert {
        (row["TOPIC"], int(row["PARTITION"])): (
            row["CURRENT-OFFSET"],
            row["LOG-END-OFFSET"],
            row["LAG"],
        )
        for row in rows
    } == {(ORDERS, p): (str(n), str(n), "0") for p, n in counts().items()}


def test_list_shows_each_tenant_its_own_groups_only(
    kafka_cluster: list[BrokerProcess],
    consumed: list[tuple[int, int, bytes, bytes]],
    beta_group: str,
) -> None:
    acme = tool(CONSUMER_GROUPS, kafka_cluster, ["--list"])
    beta = tool(CONSUMER_GROUPS, kafka_cluster, ["--list"], BETA_CLIENT)
    for done in (acme, beta):
        assert b"Error" not in done.stdout + done.stderr, said(done)
    assert GROUP in acme.stdout.decode().split()
    assert beta_group not in acme.stdout.decode().split()
    assert beta_group in beta.stdout.decode().split()
    assert GROUP not in beta.stdout.decode().split()


def test_another_tenants_credentials_cannot_read_acme_orders(
    kafka_cluster: list[BrokerProcess], produced: subprocess.CompletedProcess[bytes]
) -> None:
    """beta's service account, in a group of its own tenant, is refused the topic: the
    consumer stops on TOPIC_AUTHORIZATION_FAILED having printed nothing."""
    args = ["--topic", ORDERS, "--group", "beta.spy", "--from-beginning", "--timeout-ms", "20000"]
    done = tool(CONSOLE_CONSUMER, kafka_cluster, args, BETA_CLIENT, settings=CLASSIC)
    assert done.stdout == b""
    assert b"Not authorized to access topics: [acme.orders]" in done.stderr, said(done)
    assert b"Processed a total of 0 messages" in done.stderr
