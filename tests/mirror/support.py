"""Producing keyed records with headers, and checking copies against their sources."""

from __future__ import annotations

import threading
from typing import Any

from dataplane.client import ConsumerRecord, Producer
from tests.support.mirror import origin_of


def make_records(region: str, start: int, count: int) -> list[tuple[Any, ...]]:
    """Keyed records (every 7th keyless, every 10th with an ``x-lane`` header the copy
    must neither follow nor change), each with a trace header and its own timestamp."""
    out = []
    for i in range(start, start + count):
        key = None if i % 7 == 0 else f"{region}-k{i % 50}".encode()
        headers = [("trace", f"{region}-{i}".encode())]
        if i % 10 == 0:
            headers.append(("x-lane", b"ppe"))
        out.append((key, f"{region}-v{i}".encode(), headers, 1_700_000_000_000 + i))
    return out


def produce(
    bootstrap: str,
    topic: str,
    partitions: int,
    region: str,
    start: int,
    count: int,
    token: str | None = None,
) -> None:
    """``count`` records spread over the partitions, acknowledged by all replicas."""
    records = make_records(region, start, count)
    with Producer(
        bootstrap, acks="all", route_lanes=False, linger_ms=2, credentials=token
    ) as producer:
        futures = [
            producer.send_batch(topic, records[p::partitions], partition=p)
            for p in range(partitions)
        ]
        for f in futures:
            f.result(60)


class Background:
    """Produces ``per_round`` records every round in a thread until stopped."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, region: str, start: int
    ) -> None:
        self.args = (bootstrap, topic, partitions, region)
        self.next = start
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Background:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopped.set()
        self.thread.join(120)
        assert self.error is None, self.error

    def _run(self) -> None:
        try:
            while not self.stopped.wait(0.02):
                produce(*self.args, self.next, 300)
                self.next += 300
        except BaseException as error:  # reported by __exit__
            self.error = error


def assert_copied_exactly(
    source: dict[int, list[ConsumerRecord]],
    target: dict[int, list[ConsumerRecord]],
    from_region: str,
) -> int:
    """Every record produced in ``source`` (without ``x-origin-region``: records that
    arrived by mirror are not copied again) is in ``target`` once, in order, with key,
    value, timestamp, headers and provenance; returns how many were checked."""
    checked = 0
    for p, records in source.items():
        expected = [r for r in records if origin_of(r)[0] is None]
        copies = [r for r in target[p] if origin_of(r)[0] == from_region]
        want = [(r.key, r.value, r.timestamp, _with_provenance(r, from_region)) for r in expected]
        got = [(r.key, r.value, r.timestamp, r.headers) for r in copies]
        assert len(got) == len(want), f"partition {p}: {len(got)} copies of {len(want)} records"
        assert got == want, f"partition {p}: the copies differ from the source"
        checked += len(got)
    return checked


def local_records(records: dict[int, list[ConsumerRecord]]) -> dict[int, list[ConsumerRecord]]:
    return {p: [r for r in rs if origin_of(r)[0] is None] for p, rs in records.items()}


def _with_provenance(record: ConsumerRecord, from_region: str) -> tuple[Any, ...]:
    return (
        *record.headers,
        ("x-origin-region", from_region.encode()),
        ("x-origin-offset", str(record.offset).encode()),
    )
