"""``meridian produce``: lines from stdin or a file, or synthetic records, into a topic."""

from __future__ import annotations

import enum
import random
import string
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

import lanes
from dataplane.cli.base import invalid, parse_pairs, settings, stderr, stdout
from dataplane.client.producer import Producer
from dataplane.client.types import RecordMetadata
from dataplane.errors import ErrorCode, MeridianError

PROGRESS_EVERY = 1_000
MB = 1e6


class Acks(enum.StrEnum):
    zero = "0"
    one = "1"
    all = "all"


class Codec(enum.StrEnum):
    none = "none"
    gzip = "gzip"
    snappy = "snappy"
    lz4 = "lz4"
    zstd = "zstd"


class Tally:
    """What was sent, and what the broker acknowledged or refused (callbacks run in the
    producer's sender thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.nbytes = 0
        self.acked = 0
        self.failed = 0
        self.first_error: MeridianError | None = None

    def __call__(self, error: MeridianError | None, metadata: RecordMetadata | None) -> None:
        with self._lock:
            if error is None:
                self.acked += 1
                return
            self.failed += 1
            if self.first_error is None:
                self.first_error = error


def produce(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to write to, <tenant>.<topic>.")],
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="Read lines from FILE instead of stdin.", dir_okay=False),
    ] = None,
    key_separator: Annotated[
        str | None,
        typer.Option(help="Split each line at the first SEP: key before, value after."),
    ] = None,
    count: Annotated[
        int | None,
        typer.Option(min=1, help="Synthetic mode: send COUNT records of --size bytes."),
    ] = None,
    size: Annotated[int, typer.Option(min=0, help="Value size in synthetic mode.")] = 100,
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", help="A header KEY=VALUE (repeatable).")
    ] = None,
    partition: Annotated[
        int | None, typer.Option(min=0, help="Send every record to this partition.")
    ] = None,
    acks: Annotated[Acks, typer.Option(help="Acknowledgement wanted from the broker.")] = Acks.one,
    compression: Annotated[Codec, typer.Option(help="Batch compression.")] = Codec.none,
    linger_ms: Annotated[float, typer.Option(min=0, help="How long a batch waits.")] = 5.0,
    lane: Annotated[
        str | None,
        typer.Option(
            help="Send the records to lane LANE (the lane topic TOPIC~LANE, with an "
            "x-lane header); an x-lane --header does the same."
        ),
    ] = None,
    deliver_after: Annotated[
        float | None,
        typer.Option(
            help="Deliver the records SECONDS from now (1 s to 30 days); prints their ids."
        ),
    ] = None,
    deliver_at: Annotated[
        int | None,
        typer.Option(help="Deliver the records at this time, in ms since the epoch."),
    ] = None,
) -> None:
    """Send records to TOPIC: one per line of stdin (or --file), or --count synthetic ones."""
    if deliver_after is not None and deliver_at is not None:
        raise typer.BadParameter("--deliver-after or --deliver-at, not both")
    delay: dict[str, Any] = {}
    if deliver_after is not None:
        delay["deliver_after"] = deliver_after
    if deliver_at is not None:
        delay["deliver_at"] = deliver_at
    if count is not None and file is not None:
        raise typer.BadParameter("--count makes synthetic records; it cannot read --file")
    if lane is not None:
        try:
            lanes.check_lane_name(lane)
        except lanes.InvalidLaneNameError as exc:
            raise invalid(str(exc), ErrorCode.INVALID_CONFIG) from None
    headers = [(k, v.encode()) for k, v in parse_pairs(header or [], "header").items()]
    producer = Producer(
        settings(ctx).bootstrap,
        lane=lane,
        acks=acks.value if acks is Acks.all else int(acks.value),
        compression=compression.value,
        linger_ms=linger_ms,
        client_id="meridian-cli",
        **settings(ctx).connect,
    )
    tally = Tally()
    started = time.perf_counter()
    try:
        producer.partitions_for(topic)  # an unknown topic fails now, not after max_block_ms
        scheduled = []
        if count is not None:
            _send_synthetic(producer, topic, count, size, partition, tally, delay)
        else:
            for key, value in _records(file, key_separator):
                sent = producer.send(
                    topic, value, key, headers or None, partition, on_delivery=tally, **delay
                )
                if delay:
                    scheduled.append(sent)
                tally.sent += 1
                tally.nbytes += len(value)
        producer.flush()
        for future in scheduled:
            metadata = future.result()
            stdout().print(f"{metadata.delayed_id} due {metadata.deliver_at}")
    except MeridianError as exc:
        if tally.sent:
            producer.flush()
            raise MeridianError(
                exc.code, f"{exc.message} (the {tally.sent:,} records before it were sent)"
            ) from None
        raise
    finally:
        producer.close()
    _summary(topic, tally, time.perf_counter() - started, synthetic=count is not None)


def _records(file: Path | None, key_separator: str | None) -> Iterator[tuple[bytes | None, bytes]]:
    """``(key, value)`` per input line, without its line ending."""
    separator = key_separator.encode() if key_separator else None
    with _open(file) as stream:
        for number, raw in enumerate(stream, start=1):
            line = raw.rstrip(b"\n").rstrip(b"\r")
            if separator is None:
                yield None, line
                continue
            key, found, value = line.partition(separator)
            if not found:
                raise invalid(
                    f"line {number} has no key separator {key_separator!r}",
                    ErrorCode.INVALID_RECORD,
                )
            yield key, value


def _open(file: Path | None) -> BinaryIO:
    if file is None:
        return _Borrowed(sys.stdin.buffer)  # type: ignore[return-value]
    try:
        return file.open("rb")
    except OSError as exc:
        raise invalid(f"cannot read {file}: {exc.strerror}") from None


class _Borrowed:
    """stdin in a ``with`` block that leaves it open."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    def __enter__(self) -> BinaryIO:
        return self.stream

    def __exit__(self, *exc: object) -> None:
        return None


def _send_synthetic(
    producer: Producer,
    topic: str,
    count: int,
    size: int,
    partition: int | None,
    tally: Tally,
    delay: dict[str, Any],
) -> None:
    """``count`` records of ``size`` random letters (one value, reused), with a progress bar."""
    value = "".join(random.choices(string.ascii_letters, k=size)).encode()
    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}", markup=False),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    started = time.perf_counter()
    with Progress(*columns, console=stderr(), transient=False) as progress:
        task = progress.add_task(f"producing to {topic}", total=count, rate="")
        for i in range(1, count + 1):
            producer.send(topic, value, partition=partition, on_delivery=tally, **delay)
            tally.sent += 1
            if i % PROGRESS_EVERY == 0 or i == count:
                rate = i / max(time.perf_counter() - started, 1e-9)
                progress.update(task, completed=i, rate=f"{rate:,.0f} records/s")
    tally.nbytes = count * size


def _summary(topic: str, tally: Tally, seconds: float, *, synthetic: bool) -> None:
    if tally.first_error is not None:
        error = tally.first_error
        raise MeridianError(
            error.code, f"{tally.failed:,} of {tally.sent:,} records failed; first: {error.message}"
        )
    out = stderr()
    if synthetic:
        seconds = max(seconds, 1e-9)
        out.print(
            f"{tally.sent:,} records ({tally.nbytes / MB:,.1f} MB) in {seconds:.2f} s: "
            f"{tally.sent / seconds:,.0f} records/s, {tally.nbytes / MB / seconds:,.1f} MB/s"
        )
    out.print(f"produced {tally.sent:,} records to {topic}")
