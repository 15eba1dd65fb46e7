"""Lanes benchmark: what a lane costs a producer, how long a lane topic takes to exist on
first use, and how long an orphan hand-over takes.

1. **Produce overhead** (one broker process, no controller; ``bench.orders`` and its lane
   topic ``bench.orders~ppe`` made beforehand): ``Producer.send`` and
   ``Producer.send_batch`` of 100 B values to the trunk, then the same with
   ``Producer(lane="ppe")``, then records carrying their own ``x-lane`` header, in
   alternating rounds; the median of the rounds, and the lane's overhead against the
   trunk measured in the same run (aim: < 5 %). Lane records carry the ``x-lane``
   header (11 bytes more a record), which the figure includes.
2. **First use and hand-over** (the whole platform: the demo of ``./dev run`` with its
   controllers, Celery worker and three brokers, through ``tests/support/demo.py``):
   the time from a declared lane's first produce (its lane topic does not exist yet) to
   the ack, for several new lane topics (aim: < 2 s), and the same for a lane produced
   to right after it is declared (the brokers learn it with the controller's next
   push); and with a trunk group reading an orphaned
   lane under load, the time from a lane consumer's start to its first record (trunk to
   lane) and from its close to the trunk group's first lane record (lane to trunk).

Run on a quiet machine: ``.venv/bin/python bench/lanes_bench.py`` (``--quick`` for a smoke
run). Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit import Cleanup, num, print_table, progress, ratio, verdict
from brokerload import SDK_BATCH_BYTES, SDK_LINGER_MS, MeridianBroker

from dataplane.client import Consumer, Producer
from dataplane.client.auth import ClientCredentials
from tests.support.demo import Demo, running_demo

TOPIC = "bench.orders"
LANE = "ppe"
VALUE = b"x" * 100
OVERHEAD_AIM = 0.05
FIRST_USE_AIM_S = 2.0
DECLARED_AFTER_S = 3.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--skip-platform", action="store_true", help="part 1 only")
    return parser.parse_args(argv)


# -- 1. produce overhead -------------------------------------------------------------------
def _send(bootstrap: str, records: int, *, lane: str | None, header: bool) -> float:
    headers = [("x-lane", LANE.encode())] if header else None
    with Producer(
        bootstrap, acks=1, linger_ms=SDK_LINGER_MS, batch_bytes=SDK_BATCH_BYTES, lane=lane
    ) as producer:
        started = time.perf_counter()
        for _ in range(records):
            producer.send(TOPIC, VALUE, headers=headers)
        producer.flush()
        return records / (time.perf_counter() - started)


def _send_batch(bootstrap: str, records: int, *, lane: str | None, header: bool) -> float:
    del header
    chunk = [VALUE] * 10_000
    with Producer(
        bootstrap, acks=1, linger_ms=SDK_LINGER_MS, batch_bytes=SDK_BATCH_BYTES, lane=lane
    ) as producer:
        started = time.perf_counter()
        calls = [producer.send_batch(TOPIC, chunk) for _ in range(records // len(chunk))]
        producer.flush()
        for call in calls:
            error = call.exception(timeout=120)
            if error is not None:
                raise error
        return records / (time.perf_counter() - started)


def produce_overhead(cleanup: Cleanup, records: int, rounds: int) -> list[list[str]]:
    broker = MeridianBroker(cleanup, cleanup.mkdtemp("lanes-broker"))
    for topic in (TOPIC, f"{TOPIC}~{LANE}"):
        broker.create_topic(topic, 1, durability="never")
    cases: list[tuple[str, Callable[..., float], str | None, bool]] = [
        ("send, trunk", _send, None, False),
        ("send, Producer(lane=)", _send, LANE, False),
        ("send, x-lane header", _send, None, True),
        ("send_batch, trunk", _send_batch, None, False),
        ("send_batch, Producer(lane=)", _send_batch, LANE, False),
    ]
    results: dict[str, list[float]] = {name: [] for name, *_ in cases}
    for n in range(rounds):
        for name, run, lane, header in cases:
            progress(f"round {n + 1}/{rounds}: {name}")
            results[name].append(run(broker.address, records, lane=lane, header=header))
    rows = []
    for name, *_ in cases:
        median = statistics.median(results[name])
        base = statistics.median(results[name.split(",")[0] + ", trunk"])
        overhead = 1 - median / base
        is_trunk = name.endswith("trunk")
        rows.append(
            [
                name,
                num(median),
                "" if is_trunk else ratio(median, base),
                "" if is_trunk else f"{overhead * 100:+.1f} %",
                "" if is_trunk else verdict(overhead < OVERHEAD_AIM),
            ]
        )
    broker.close()
    return rows


# -- 2. first use and hand-over ------------------------------------------------------------
def _credentials(demo: Demo) -> ClientCredentials:
    return ClientCredentials(demo.token_url, demo.client_id, demo.client_secret)


def _wait(check: Callable[[], Any], timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"not within {timeout_s} s: {what}")
        time.sleep(0.01)
    return time.monotonic() - started


def _first_ack_s(demo: Demo, lane: str) -> float:
    with Producer(demo.bootstrap, acks="all", credentials=_credentials(demo), lane=lane) as p:
        started = time.monotonic()
        p.send("demo.firstuse", b"first").result(timeout=60)
        return time.monotonic() - started


def first_use(demo: Demo, lanes: int) -> tuple[list[float], list[float]]:
    """(declared lanes' first produce -> ack, lanes created and produced to at once)."""
    status, body = demo.call("POST", "/topics", {"name": "firstuse", "partitions": 3})
    if status != 201:
        raise RuntimeError(body)
    _wait(lambda: demo.call("GET", "/topics/demo.firstuse")[1]["status"] == "ready", 60, "topic")
    declared = [f"declared-{n}" for n in range(lanes)]
    for lane in declared:
        demo.call("POST", "/lanes", {"name": lane, "orphan_policy": "hold"})
    time.sleep(DECLARED_AFTER_S)  # every broker has had the pushes that declare them
    known = []
    for lane in declared:
        known.append(_first_ack_s(demo, lane))
        progress(f"declared lane {lane}: first produce acknowledged after {known[-1]:.2f} s")
    at_once = []
    for n in range(lanes):
        lane = f"fresh-{n}"
        demo.call("POST", "/lanes", {"name": lane, "orphan_policy": "hold"})
        at_once.append(_first_ack_s(demo, lane))
        progress(f"lane {lane} just made: first produce acknowledged after {at_once[-1]:.2f} s")
    return known, at_once


class _Reader:
    def __init__(self, demo: Demo, group: str, lane: str | None) -> None:
        self.first_lane_record_at: float | None = None
        self.lane_records = 0
        self._stop = threading.Event()
        self._args = (demo, group, lane)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        demo, group, lane = self._args
        with Consumer(
            demo.bootstrap,
            group_id=group,
            lane=lane,
            auto_offset_reset="earliest",
            credentials=_credentials(demo),
            session_timeout_ms=6_000,
            heartbeat_interval_ms=1_000,
        ) as consumer:
            consumer.subscribe(["demo.handover"])
            while not self._stop.is_set():
                for record in consumer.poll(timeout_ms=100):
                    if "~" in record.topic:
                        self.lane_records += 1
                        if self.first_lane_record_at is None:
                            self.first_lane_record_at = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def hand_over(demo: Demo) -> tuple[float, float]:
    demo.call("POST", "/topics", {"name": "handover", "partitions": 3})
    _wait(lambda: demo.call("GET", "/topics/demo.handover")[1]["status"] == "ready", 60, "topic")
    demo.call("POST", "/lanes", {"name": "orphan", "orphan_policy": "trunk"})
    stop = threading.Event()

    def load() -> None:
        with Producer(
            demo.bootstrap, acks=1, credentials=_credentials(demo), lane="orphan"
        ) as producer:
            while not stop.is_set():
                producer.send("demo.handover", b"load")
                time.sleep(0.002)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        trunk = _Reader(demo, "demo.bench", None)
        _wait(lambda: trunk.lane_records > 0, 60, "the trunk group reads the orphaned lane")
        started = time.monotonic()
        lane = _Reader(demo, "demo.bench", "orphan")
        _wait(lambda: lane.first_lane_record_at is not None, 120, "trunk to lane")
        assert lane.first_lane_record_at is not None
        to_lane = lane.first_lane_record_at - started
        progress(f"trunk -> lane hand-over: {to_lane:.2f} s")
        time.sleep(2)
        trunk.first_lane_record_at = None
        started = time.monotonic()
        lane.stop()
        _wait(lambda: trunk.first_lane_record_at is not None, 120, "lane to trunk")
        assert trunk.first_lane_record_at is not None
        to_trunk = trunk.first_lane_record_at - started
        progress(f"lane -> trunk hand-over: {to_trunk:.2f} s")
        trunk.stop()
    finally:
        stop.set()
        loader.join(30)
    return to_lane, to_trunk


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    records, rounds = (50_000, 1) if args.quick else (300_000, 3)
    with Cleanup(Path(tempfile.gettempdir())) as cleanup:
        rows = produce_overhead(cleanup, records, rounds)
        print_table(
            f"1. Produce overhead of a lane ({records:,} records of 100 B a run, "
            f"median of {rounds})",
            ["case", "records/s", "vs trunk", "overhead", f"aim < {OVERHEAD_AIM:.0%}"],
            rows,
        )
        if args.skip_platform:
            return 0
        with running_demo(cleanup.mkdtemp("lanes-demo") / "demo", records=10) as demo:
            known, at_once = first_use(demo, 2 if args.quick else 5)
            to_lane, to_trunk = hand_over(demo)
    median = statistics.median
    print_table(
        "2. First use and hand-over (the demo platform: 3 brokers, 2 controllers, Celery)",
        ["measure", "seconds", "aim"],
        [
            ["declared lane: first produce -> ack (lane topic made), median",
             f"{median(known):.2f}", verdict(median(known) < FIRST_USE_AIM_S)],
            ["declared lane: first produce -> ack, max", f"{max(known):.2f}", ""],
            ["lane declared and produced to at once: -> ack, median", f"{median(at_once):.2f}",
             ""],
            ["hand-over trunk -> lane (lane consumer start -> first record)", f"{to_lane:.2f}", ""],
            ["hand-over lane -> trunk (lane consumer close -> trunk's first)", f"{to_trunk:.2f}",
             ""],
        ],
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
