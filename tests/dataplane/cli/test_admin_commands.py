"""meridian topics, groups and offsets against a broker process."""

from __future__ import annotations

import time

from tests.dataplane.cli.conftest import Cli


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.strip()]


def test_topic_lifecycle(cli: Cli) -> None:
    """create (with config), list, describe and delete a topic."""
    created = cli.ok(
        "topics", "create", "cli.lifecycle", "--partitions", "3", "--config", "retention_ms=60000"
    )
    assert "created topic cli.lifecycle with 3 partitions" in created.stdout
    assert ["cli.lifecycle", "3"] in rows(cli.ok("topics", "list").stdout)

    described = cli.ok("topics", "describe", "cli.lifecycle").stdout
    assert "cli.lifecycle: 3 partitions, 0 records" in described
    assert ["retention_ms", "60000"] in rows(described)
    assert [r[0] for r in rows(described) if r[-1] == "online"] == ["0", "1", "2"]

    assert "deleted topic cli.lifecycle" in cli.ok("topics", "delete", "cli.lifecycle").stdout
    assert "cli.lifecycle" not in cli.ok("topics", "list").stdout
    gone = cli("topics", "describe", "cli.lifecycle")
    assert gone.exit_code == 1
    assert gone.stderr.startswith("error: UNKNOWN_TOPIC_OR_PARTITION: ")


def test_group_describe_shows_committed_end_and_lag(cli: Cli, topic: str) -> None:
    """A group that printed 4 of 10 records has committed 4 and lags by 6 records, and
    by the age of record 4 in seconds."""
    cli.ok("produce", topic, "--partition", "0", input="".join(f"r{i}\n" for i in range(10)))
    consumed = cli.ok(
        "consume", topic, "--group", "cli-lag", "--from-beginning", "--max-messages", "4"
    )
    assert consumed.stdout.splitlines() == ["r0", "r1", "r2", "r3"]

    described = cli.ok("groups", "describe", "cli-lag").stdout

    assert "group cli-lag: Empty" in described
    row = next(r for r in rows(described) if r[0] == topic)
    assert row[:5] == [topic, "0", "4", "10", "6"]
    assert row[6] == "-"
    assert float(row[5]) > 0  # lag in seconds: record 4 is older than now
    assert ["cli-lag", "Empty", "consumer"] in rows(cli.ok("groups", "list").stdout)
    again = cli.ok("consume", topic, "--group", "cli-lag", "--max-messages", "2")
    assert again.stdout.splitlines() == ["r4", "r5"]


def test_offsets_earliest_latest_and_by_time(cli: Cli, topic: str) -> None:
    """offsets --time earliest/latest/<ms> per partition."""
    before = int(time.time() * 1000) - 1
    cli.ok("produce", topic, "--partition", "1", input="a\nb\nc\n")

    assert rows(cli.ok("offsets", topic).stdout)[1:] == [["0", "0", "-"], ["1", "3", "-"]]
    earliest = rows(cli.ok("offsets", topic, "--time", "earliest").stdout)[1:]
    assert [r[:2] for r in earliest] == [["0", "0"], ["1", "0"]]
    by_time = rows(cli.ok("offsets", topic, "--time", str(before)).stdout)[1:]
    assert [r[:2] for r in by_time] == [["0", "none"], ["1", "0"]]
    future = rows(cli.ok("offsets", topic, "--time", str(before + 3_600_000)).stdout)[1:]
    assert [r[1] for r in future] == ["none", "none"]
