"""``meridian consume``: print the records of a topic, alone or as a member of a group."""

from __future__ import annotations

import base64
import enum
import json
import sys
import time
from typing import Annotated, Any

import typer

import lanes
from dataplane.cli.base import Settings, invalid, settings, stderr
from dataplane.client import Consumer, ConsumerRecord, TopicPartition
from dataplane.errors import ErrorCode

POLL_MS = 200


class Format(enum.StrEnum):
    text = "text"
    json = "json"


def consume(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to read, <tenant>.<topic>.")],
    group: Annotated[
        str | None,
        typer.Option("--group", "-g", help="Consume as a member of GROUP, committing offsets."),
    ] = None,
    from_beginning: Annotated[
        bool,
        typer.Option(
            "--from-beginning", help="Start at the earliest offset (a group: if it has none)."
        ),
    ] = False,
    max_messages: Annotated[
        int | None, typer.Option(min=1, help="Stop after this many records.")
    ] = None,
    partition: Annotated[int | None, typer.Option(min=0, help="Read only this partition.")] = None,
    offset: Annotated[
        int | None, typer.Option(min=0, help="Start at this offset (needs --partition).")
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", help="text: values; json: records.")] = (
        Format.text
    ),
    timeout_ms: Annotated[
        int | None, typer.Option(min=1, help="Stop when no record came for this long.")
    ] = None,
    lane: Annotated[
        str | None,
        typer.Option(
            help="Read lane LANE of TOPIC: with --group as the lane's group GROUP~LANE "
            "(and the trunk too if the lane says consume_trunk), else its lane topic TOPIC~LANE."
        ),
    ] = None,
) -> None:
    """Print the records of TOPIC, one per line, until --max-messages or Ctrl-C."""
    if offset is not None and partition is None:
        raise typer.BadParameter("--offset needs --partition")
    if lane is not None:
        try:
            lanes.check_lane_name(lane)
        except lanes.InvalidLaneNameError as exc:
            raise invalid(str(exc), ErrorCode.INVALID_CONFIG) from None
    consumer = _open(settings(ctx), topic, group, from_beginning, partition, offset, lane)
    printed = 0
    try:
        printed = _print_records(consumer, fmt, max_messages, timeout_ms)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close(commit=False)
    stderr().print(f"consumed {printed:,} records")


def _open(
    options: Settings,
    topic: str,
    group: str | None,
    from_beginning: bool,
    partition: int | None,
    offset: int | None,
    lane: str | None = None,
) -> Consumer:
    """A consumer positioned as asked: a group member (committed offsets, else the start
    or the end), or the topic's partitions assigned by hand (a lane's: its lane topic's)."""
    consumer = Consumer(
        options.bootstrap,
        group_id=group,
        lane=lane if group is not None else None,
        auto_offset_reset="earliest" if from_beginning else "latest",
        enable_auto_commit=False,  # commits follow what was printed (_commit)
        client_id="meridian-cli",
        **options.connect,
    )
    try:
        if group is not None and partition is None:
            consumer.subscribe([topic])
            return consumer
        if lane is not None:
            topic = lanes.lane_topic(topic, lane)
        partitions = consumer.partitions_for(topic)
        if partition is not None and partition not in partitions:
            raise invalid(
                f"topic {topic!r} has no partition {partition}", ErrorCode.INVALID_PARTITIONS
            )
        assigned = [TopicPartition(topic, p) for p in partitions if partition in (None, p)]
        consumer.assign(assigned)
        if offset is not None:
            consumer.seek(assigned[0], offset)
    except BaseException:
        consumer.close(commit=False)
        raise
    return consumer


def _print_records(
    consumer: Consumer, fmt: Format, max_messages: int | None, timeout_ms: int | None
) -> int:
    printed = 0
    last_record = time.monotonic()
    render = _json if fmt is Format.json else _text
    while max_messages is None or printed < max_messages:
        records = consumer.poll(timeout_ms=POLL_MS)
        if not records:
            if timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= timeout_ms:
                break
            continue
        last_record = time.monotonic()
        if max_messages is not None:
            records = records[: max_messages - printed]
        sys.stdout.write("".join(render(record) + "\n" for record in records))
        sys.stdout.flush()
        printed += len(records)
        _commit(consumer, records)
    return printed


def _commit(consumer: Consumer, records: list[ConsumerRecord]) -> None:
    """Commits the offset after each printed record (groups only)."""
    if consumer.group_id is None:
        return
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
    consumer.commit(offsets)


def _text(record: ConsumerRecord) -> str:
    return "" if record.value is None else record.value.decode("utf-8", "backslashreplace")


def _json(record: ConsumerRecord) -> str:
    out: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
    }
    out.update(_bytes_field("key", record.key))
    out.update(_bytes_field("value", record.value))
    out["headers"] = [dict(_bytes_field("value", v), key=k) for k, v in record.headers]
    return json.dumps(out, sort_keys=True)


def _bytes_field(name: str, data: bytes | None) -> dict[str, Any]:
    """``{name: text}`` for UTF-8 (or null); ``{name + "_base64": ...}`` otherwise."""
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode("ascii")}
