"""meridian produce and consume against a broker process: lines in, records back out."""

from __future__ import annotations

import json
from pathlib import Path

from tests.dataplane.cli.conftest import Cli


def consume_json(cli: Cli, topic: str, count: int, *args: str) -> list[dict[str, object]]:
    result = cli.ok("consume", topic, "--max-messages", str(count), "--format", "json", *args)
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_keyed_lines_come_back_with_their_keys_in_order(cli: Cli, topic: str) -> None:
    """Lines split at --key-separator are stored as key and value, in order per partition."""
    lines = [f"user-{i % 5}:event {i}" for i in range(30)]
    result = cli.ok("produce", topic, "--key-separator", ":", input="\n".join(lines) + "\n")
    assert "produced 30 records" in result.stderr

    records = consume_json(cli, topic, 30, "--from-beginning")

    assert sorted((r["key"], r["value"]) for r in records) == sorted(
        tuple(line.split(":", 1)) for line in lines
    )
    by_key: dict[object, set[object]] = {}
    for record in records:
        by_key.setdefault(record["key"], set()).add(record["partition"])
    assert all(len(partitions) == 1 for partitions in by_key.values())
    for partition in {r["partition"] for r in records}:
        mine = [r for r in records if r["partition"] == partition]
        assert [r["offset"] for r in mine] == list(range(len(mine)))
        assert [r["value"] for r in mine] == [
            line.split(":", 1)[1]
            for line in lines
            if any(line.startswith(f"{r['key']}:") for r in mine)
        ]


def test_text_format_prints_values_one_per_line(cli: Cli, topic: str, tmp_path: Path) -> None:
    """--file is read line by line; --format text prints each value on its own line."""
    source = tmp_path / "lines.txt"
    source.write_text("alpha\nbeta\ngamma\n")
    cli.ok("produce", topic, "--file", str(source), "--partition", "1")

    result = cli.ok("consume", topic, "--from-beginning", "--max-messages", "3")

    assert result.stdout.splitlines() == ["alpha", "beta", "gamma"]
    assert "consumed 3 records" in result.stderr


def test_acks_all_is_accepted(cli: Cli, topic: str) -> None:
    """--acks all: acknowledged once every in-sync replica (here the leader) has it."""
    cli.ok("produce", topic, "--partition", "0", "--acks", "all", input="x\ny\n")

    records = consume_json(cli, topic, 2, "--partition", "0", "--offset", "0")

    assert [r["value"] for r in records] == ["x", "y"]


def test_partition_and_offset_start_where_asked(cli: Cli, topic: str) -> None:
    """--partition P --offset O reads P from offset O."""
    lines = "".join(f"v{i}\n" for i in range(10))
    cli.ok("produce", topic, "--partition", "0", input=lines)

    records = consume_json(cli, topic, 4, "--partition", "0", "--offset", "6")

    assert [(r["partition"], r["offset"], r["value"]) for r in records] == [
        (0, 6, "v6"),
        (0, 7, "v7"),
        (0, 8, "v8"),
        (0, 9, "v9"),
    ]


def test_synthetic_records_are_all_stored(cli: Cli, topic: str) -> None:
    """--count N --size B sends N records of B bytes and reports the rate."""
    result = cli.ok("produce", topic, "--count", "2000", "--size", "50", "--compression", "lz4")
    assert "2,000 records" in result.stderr
    assert "records/s" in result.stderr

    offsets = cli.ok("offsets", topic).stdout.splitlines()[1:]

    assert sum(int(line.split()[1]) for line in offsets) == 2000
    records = consume_json(cli, topic, 3, "--from-beginning")
    assert all(len(str(r["value"])) == 50 for r in records)


def test_headers_and_binary_values_survive_json(cli: Cli, topic: str) -> None:
    """--header travels with each record; bytes that are not UTF-8 come back in base64."""
    cli.ok("produce", topic, "--partition", "0", "--header", "x-team=ppe", input=b"\xff\xfe\n")

    [record] = consume_json(cli, topic, 1, "--from-beginning")

    assert record["headers"] == [{"key": "x-team", "value": "ppe"}]
    assert record["value_base64"] == "//4="


def test_lane_records_go_to_the_lane_topic_and_come_back_by_lane(cli: Cli, topic: str) -> None:
    """--lane on produce sends to TOPIC~LANE with an x-lane header; --lane on consume reads
    that lane (as the group GROUP~LANE with --group), never the trunk."""
    cli.ok("topics", "create", f"{topic}~ppe", "--partitions", "2")
    cli.ok("produce", topic, "--partition", "0", input="trunk\n")
    cli.ok("produce", topic, "--partition", "0", "--lane", "ppe", input="l0\nl1\n")

    grouped = consume_json(cli, topic, 2, "--lane", "ppe", "--group", "g", "--from-beginning")
    direct = consume_json(cli, topic, 2, "--lane", "ppe", "--from-beginning")
    trunk = consume_json(cli, topic, 1, "--from-beginning")

    for records in (grouped, direct):
        assert [r["value"] for r in records] == ["l0", "l1"]
        assert {r["topic"] for r in records} == {f"{topic}~ppe"}
        assert all(r["headers"] == [{"key": "x-lane", "value": "ppe"}] for r in records)
    assert [r["value"] for r in trunk] == ["trunk"]


def test_a_bad_lane_name_is_refused(cli: Cli, topic: str) -> None:
    for command in (["produce", topic], ["consume", topic, "--group", "g"]):
        result = cli(*command, "--lane", "Bad_Lane", input="x\n")
        assert result.exit_code != 0
        assert "invalid lane name" in result.stderr
