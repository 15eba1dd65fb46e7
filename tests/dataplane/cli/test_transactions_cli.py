"""meridian transactions and meridian half-messages against a broker process: a hanging
transaction listed with its partitions and aborted (its producer fenced), a pending half
message listed and committed, and the typed errors of what is not there."""

from __future__ import annotations

import pytest

from dataplane.client import MeridianError, Producer, TopicPartition
from dataplane.errors import ErrorCode
from tests.dataplane.broker.txn.support import ends, read_topic
from tests.dataplane.cli.conftest import Cli


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.strip()]


def test_a_hanging_transaction_is_listed_and_aborted(cli: Cli, topic: str) -> None:
    producer = Producer(cli.bootstrap, transactional_id="cli.hanging", linger_ms=1)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"stuck", partition=1)
        producer.flush()
        listed = rows(cli.ok("transactions", "list", "--state", "ongoing").stdout)
        row = next(r for r in listed if r[0] == "cli.hanging")
        assert (row[1], row[-1]) == ("ongoing", f"{topic}/1")
        described = cli.ok("transactions", "describe", "cli.hanging").stdout
        assert "open for" in described
        assert f"on {topic}/1" in described
        aborted = cli.ok("transactions", "abort", "cli.hanging").stdout
        assert aborted.startswith("cli.hanging: ")
        assert "abort" in aborted
        refused = cli("transactions", "abort", "cli.hanging")
        assert refused.exit_code == 1
        assert refused.stderr.startswith("error: INVALID_TXN_STATE: ")
        with pytest.raises(MeridianError) as fenced:
            producer.commit_transaction()
        assert fenced.value.code == ErrorCode.PRODUCER_FENCED
    finally:
        producer.close(1)
    missing = cli("transactions", "describe", "cli.never")
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error: TRANSACTIONAL_ID_NOT_FOUND: ")
    assert cli("transactions", "list", "--state", "sleeping").exit_code == 2


def test_a_pending_half_message_is_listed_and_committed(cli: Cli, topic: str) -> None:
    with Producer(
        cli.bootstrap, producer_group="cli.payments", half_check_interval_ms=600_000
    ) as p:
        half = p.send_half(topic, b"half", partition=0)
    pending = rows(cli.ok("half-messages", "list", "--group", "cli.payments").stdout)
    assert [r[:4] for r in pending[1:]] == [["cli.payments", half.half_id, f"{topic}/0", "ongoing"]]
    done = cli.ok("half-messages", "commit", "cli.payments", half.half_id).stdout
    assert "commit" in done
    decided = rows(cli.ok("half-messages", "list", "--group", "cli.payments").stdout)
    assert decided[1][-1] == "operator"
    refused = cli("half-messages", "rollback", "cli.payments", half.half_id)
    assert refused.stderr.startswith("error: INVALID_TXN_STATE: ")
    unknown = cli("half-messages", "commit", "cli.payments", "f00")
    assert unknown.stderr.startswith("error: HALF_MESSAGE_NOT_FOUND: ")


def test_a_transaction_hanging_on_a_partition_is_aborted_there(cli: Cli, topic: str) -> None:
    """Kafka's kafka-transactions --abort: the partition's producers are listed with the
    offset their open transaction began at, and an abort marker written for one moves
    the partition's last stable offset past it; its records stay unread at
    read_committed."""
    producer = Producer(cli.bootstrap, transactional_id="cli.stuck", linger_ms=1)
    tp = TopicPartition(topic, 1)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        first = producer.send(topic, b"stuck", partition=1).result(30).offset
        listed = rows(cli.ok("transactions", "producers", topic, "1").stdout)
        row = next(r for r in listed[1:] if r[3] != "-")
        producer_id = int(row[0])
        assert int(row[3]) == first
        assert ends(cli.bootstrap, [tp], committed=True)[tp] == first  # held back
        done = cli.ok("transactions", "abort-producer", topic, "1", str(producer_id)).stdout
        assert f"from offset {first}" in done
        assert ends(cli.bootstrap, [tp], committed=True) == ends(
            cli.bootstrap, [tp], committed=False
        )
        read = read_topic(cli.bootstrap, topic, 2, committed=True)
        assert b"stuck" not in [r.value for r in read]
        again = cli("transactions", "abort-producer", topic, "1", str(producer_id))
        assert again.stderr.startswith("error: INVALID_TXN_STATE: ")
    finally:
        producer.close(1)
