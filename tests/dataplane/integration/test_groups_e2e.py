"""Consumer groups across three real broker processes, with consumers that die."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from dataplane.client import Admin, Consumer, Producer, TopicPartition
from tests.support.brokers import REPO_ROOT, BrokerProcess

TOPIC = "acme.payments"
SESSION_TIMEOUT_MS = 6000


def _bootstrap(cluster: list[BrokerProcess]) -> str:
    return ",".join(b.address for b in cluster)


class _ContinuousProducer(threading.Thread):
    """Keyed records at a modest rate until stopped; remembers every acknowledged one."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(bootstrap, linger_ms=2, client_id="e2e-producer")
        self.topic = topic
        self.acked: dict[tuple[int, int], bytes] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                futures = []
                for _ in range(20):
                    value = f"payment-{n}".encode()
                    futures.append((value, self.producer.send(self.topic, value, key=value)))
                    n += 1
                for value, future in futures:
                    meta = future.result(timeout=30)
                    self.acked[(meta.partition, meta.offset)] = value
                time.sleep(0.01)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.join(60)
        self.producer.close()
        assert self.error is None, self.error


def _poll_until(
    consumer: Consumer, seen: dict[tuple[int, int], bytes], done: Callable[[], bool], limit_s: float
) -> None:
    deadline = time.monotonic() + limit_s
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        for record in consumer.poll(timeout_ms=200):
            seen.setdefault((record.partition, record.offset), record.value or b"")


def test_group_members_share_partitions_and_consume_everything_once(cluster):
    bootstrap = _bootstrap(cluster)
    with Admin(bootstrap) as admin:
        admin.create_topic(TOPIC, 6)
    with Producer(bootstrap) as producer:
        futures = [
            producer.send(TOPIC, f"v{n}".encode(), key=f"k{n}".encode()) for n in range(3000)
        ]
        producer.flush()
        acked = {(f.result().partition, f.result().offset) for f in futures}
    total = len(acked)
    seen: list[dict[tuple[int, int], bytes]] = [{} for _ in range(3)]
    assignments: list[set[TopicPartition]] = [set() for _ in range(3)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def member(index: int) -> None:
        got = seen[index]
        try:
            with Consumer(
                bootstrap, group_id="acme.billing", auto_offset_reset="earliest"
            ) as consumer:
                consumer.subscribe([TOPIC])
                while not stop.is_set():
                    for record in consumer.poll(timeout_ms=100):
                        key = (record.partition, record.offset)
                        assert key not in got, f"{key} delivered twice to one member"
                        got[key] = record.value or b""
                    assignments[index] = set(consumer.assignment())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(3)]
    for thread in threads:
        thread.start()
    try:
        _wait_until(
            lambda: (sum(len(s) for s in seen) >= total and all(assignments)) or bool(errors), 90
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not errors, errors
    union = set().union(*assignments)
    assert union == {TopicPartition(TOPIC, p) for p in range(6)}
    assert sum(len(a) for a in assignments) == 6, "a partition is assigned to two members"
    assert all(assignments), "every member got partitions"
    consumed = [key for got in seen for key in got]
    assert sorted(consumed) == sorted(acked), "each acknowledged record consumed exactly once"


def test_killed_consumer_partitions_move_and_nothing_committed_is_skipped(cluster, tmp_path: Path):
    bootstrap = _bootstrap(cluster)
    group = "acme.ledger"
    with Admin(bootstrap) as admin:
        admin.create_topic(TOPIC, 4)
    feeder = _ContinuousProducer(bootstrap, TOPIC)
    feeder.start()
    out = tmp_path / "worker.out"
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.dataplane.integration.consumer_worker",
            bootstrap,
            TOPIC,
            group,
            str(out),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    survivor = Consumer(
        bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=500,
    )
    survivor_seen: dict[tuple[int, int], bytes] = {}
    first_offsets: dict[int, int] = {}
    try:
        _wait_for_line(worker, "assigned [0, 1, 2, 3]")
        survivor.subscribe([TOPIC])
        _poll_until(survivor, survivor_seen, lambda: len(survivor.assignment()) == 2, 60)
        worker_parts = {p for p in range(4)} - {tp.partition for tp in survivor.assignment()}
        _wait_until(lambda: _commits(out, worker_parts) == worker_parts, 60)
        worker.kill()  # SIGKILL
        killed_at = time.monotonic()
        worker.wait()

        def took_over() -> bool:
            return len(survivor.assignment()) == 4

        _poll_until(survivor, survivor_seen, took_over, 60)
        took = time.monotonic() - killed_at
        # Read once the group moved on: a commit the worker sent just before its SIGKILL
        # may reach the coordinator after the kill, and it counts.
        committed = survivor.committed([TopicPartition(TOPIC, p) for p in worker_parts])
        print(f"partitions {sorted(worker_parts)} reassigned {took:.2f} s after SIGKILL")
        # a liveness bound, not a speed claim: the session timeout plus one rebalance
        assert took < SESSION_TIMEOUT_MS / 1000 + 10
        before = len(survivor_seen)
        feeder.finish()
        with Admin(bootstrap) as admin:
            latest = admin.list_offsets({TopicPartition(TOPIC, p): "latest" for p in range(4)})
        ends = {tp: offset for tp, (offset, _) in latest.items()}

        def drained() -> bool:
            return all(survivor.position(tp) >= end for tp, end in ends.items())

        _poll_until(survivor, survivor_seen, drained, 60)
        for partition, offset in sorted(survivor_seen):  # it never owned them before
            first_offsets.setdefault(partition, offset)
        assert len(survivor_seen) > before
    finally:
        if worker.poll() is None:
            worker.kill()
        survivor.close()
        feeder.stop.set()
    for partition in worker_parts:
        tp = TopicPartition(TOPIC, partition)
        assert committed[tp] is not None
        assert first_offsets[partition] == committed[tp], (
            f"partition {partition}: the survivor started at {first_offsets[partition]}, "
            f"the dead member had committed {committed[tp]}"
        )
    worker_seen = _processed(out)
    missing = set(feeder.acked) - worker_seen - set(survivor_seen)
    assert not missing, f"{len(missing)} acknowledged records were never consumed"


def _wait_for_line(process: subprocess.Popen[str], wanted: str, limit_s: float = 60) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"worker exited with {process.wait()}")
        if line.strip() == wanted:
            return
    raise AssertionError(f"worker never printed {wanted!r}")


def _wait_until(condition: Callable[[], bool], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def _commits(out: Path, partitions: set[int]) -> set[int]:
    if not out.exists():
        return set()
    committed = set()
    for line in out.read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "commit" and int(parts[1]) in partitions:
            committed.add(int(parts[1]))
    return committed


def _processed(out: Path) -> set[tuple[int, int]]:
    seen = set()
    for line in out.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            seen.add((int(parts[0]), int(parts[1])))
    return seen
