"""The replication fault test: no acknowledged record is lost, duplicated or reordered,
and replicas never diverge, while brokers are killed and partitioned at random.

A real controller process (Postgres lease) starts three brokers through its local
provisioner; a topic with replication factor 3 and ``min_insync_replicas=2`` is created
through the control plane's services. Idempotent SDK producers with ``acks="all"`` write
sequence-numbered records without pause and log every acknowledged (partition, offset,
payload). The chaos loop (``chaos.py``) faults a leader or a follower at random,
``FAULTS`` times — SIGKILL (restarted at once by the provisioner, or kept down for a few
seconds) or SIGSTOP then SIGCONT (a network partition), of one broker or of two at once
(two replicas of every partition: no record sent meanwhile may be acknowledged before
one is back) — letting the cluster recover in between, and prints how long each
failover took and who leads afterwards. Then:
producers stop; every ISR is full again; a consumer reads every partition up to its high
watermark, and every acknowledged record must be there exactly once, at its acknowledged
offset, in send order; the controller and the brokers stop cleanly, and every replica of
each partition must hold the same bytes up to the high watermark (read with
``PartitionLog``).

Environment, to replay or vary a run: ``MERIDIAN_FAULT_SEED`` (the seed is printed),
``MERIDIAN_FAULT_COUNT`` (faults, default 20), ``MERIDIAN_FAULT_RF`` (3; with 1 the
harness runs where replication is absent: acks=1, leader faults only).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.regions import services
from dataplane.client import Admin, Consumer, TopicPartition
from dataplane.errors import MeridianError
from tests.integration.replication.chaos import Chaos, summary
from tests.integration.replication.load import ProducerLoad
from tests.integration.replication.region import ADMIN, ReplicatedRegion, wait_until
from tests.integration.replication.verify import (
    check_partition,
    compare_replicas,
    read_replica,
)

FAULTS = int(os.environ.get("MERIDIAN_FAULT_COUNT", "20"))
REPLICATION_FACTOR = int(os.environ.get("MERIDIAN_FAULT_RF", "3"))
PARTITIONS = 4
MIN_INSYNC_REPLICAS = min(2, REPLICATION_FACTOR)
CONSUME_TIMEOUT_S = 60.0

pytestmark = pytest.mark.slow


@pytest.fixture
def region(
    transactional_db: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ReplicatedRegion]:
    row = services.create_region(name="fault-region", actor=ADMIN)
    region = ReplicatedRegion(tmp_path, row)
    try:
        yield region
    finally:
        region.kill_all()
        report = getattr(request.node, "report_call", None)
        if report is None or report.failed:
            print(region.logs())


def test_acknowledged_records_survive_kills_and_partitions(region: ReplicatedRegion) -> None:
    seed = int(os.environ.get("MERIDIAN_FAULT_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\nfault test seed {seed} (replay: MERIDIAN_FAULT_SEED={seed})", flush=True)
    started = time.monotonic()
    region.start(brokers=3)
    topic = region.create_topic(
        "orders",
        partitions=PARTITIONS,
        replication_factor=REPLICATION_FACTOR,
        min_isr=MIN_INSYNC_REPLICAS,
    )
    epochs_before = {p: s.leader_epoch for p, s in region.states().items()}
    acks = "all" if REPLICATION_FACTOR > 1 else 1
    load = ProducerLoad(region.bootstrap, topic.full_name, PARTITIONS, acks=acks).start()
    chaos = Chaos(region, load, seed=seed, replicated=REPLICATION_FACTOR > 1)
    try:
        wait_until(lambda: all(load.first_ack_after(p, 0.0) for p in range(PARTITIONS)), 30,
                   "a first acknowledgement on every partition")  # fmt: skip
        chaos.run(FAULTS)
    except AssertionError as stuck:  # the cluster did not recover: say what was lost too
        chaos.resume_all()
        load.stop()
        raise AssertionError(f"seed {seed}: {stuck}\n{_diagnose(region, load)}") from None
    finally:
        chaos.resume_all()
        load.stop()
    print(summary(chaos.faults))
    print(f"{load.sent} records sent, {load.count()} acknowledged, {len(load.failures)} failed")
    if load.failures:  # not acknowledged: allowed, but say why (the exception, not the record)
        reasons = Counter(error[:80] for _, error in load.failures)
        print("failed sends:", dict(reasons.most_common(5)))
    assert len(chaos.faults) >= FAULTS
    epochs_after = {p: s.leader_epoch for p, s in region.states().items()}
    print(f"leader epochs: before {epochs_before}, after {epochs_after}")
    if REPLICATION_FACTOR > 1 and FAULTS >= 5:  # leaders really moved: these were failovers
        assert sum(epochs_after.values()) > sum(epochs_before.values()), epochs_after

    wait_until(region.all_in_sync, 60, "every ISR full after the producers stopped")
    high_watermarks = _high_watermarks(region.bootstrap, topic.full_name)
    problems = list(chaos.violations)
    problems += _check_consumed(region.bootstrap, topic.full_name, load, high_watermarks)
    region.stop_controller()
    forced = region.stop_brokers()
    assert not forced, f"brokers {forced} did not stop on SIGTERM"
    problems += _check_replicas(region, high_watermarks)
    print(f"checked {sum(high_watermarks.values())} records in {PARTITIONS} partitions; "
          f"whole test {time.monotonic() - started:.0f} s")  # fmt: skip
    assert not problems, f"seed {seed}: {len(problems)} problems:\n" + "\n".join(problems)


def _diagnose(region: ReplicatedRegion, load: ProducerLoad) -> str:
    """What the partitions still readable hold against the acknowledgements, for a run
    whose cluster did not recover (best effort: a partition without a leader is named)."""
    assert region.topic is not None
    lines = []
    for p in range(PARTITIONS):
        try:
            high_watermark = _high_watermarks(region.bootstrap, region.topic.full_name, [p])
            records = _consume(region.bootstrap, region.topic.full_name, high_watermark, 15.0)
            lines += check_partition(p, load.acked().get(p, []), records[p],
                                     high_watermark=high_watermark[p])  # fmt: skip
        except (AssertionError, MeridianError) as exc:
            lines.append(f"p{p}: not readable: {exc}")
    return "\n".join(lines) or "every readable partition holds every acknowledged record"


def _high_watermarks(
    bootstrap: str, topic: str, partitions: list[int] | None = None
) -> dict[int, int]:
    admin = Admin(bootstrap, request_timeout_ms=10_000)
    try:
        chosen = range(PARTITIONS) if partitions is None else partitions
        wanted = {TopicPartition(topic, p): "latest" for p in chosen}
        return {tp.partition: offset for tp, (offset, _) in admin.list_offsets(wanted).items()}
    finally:
        admin.close()


def _check_consumed(
    bootstrap: str, topic: str, load: ProducerLoad, high_watermarks: dict[int, int]
) -> list[str]:
    """Read every partition from its start to its high watermark with the SDK consumer
    and check it against the acknowledgements."""
    records = _consume(bootstrap, topic, high_watermarks)
    acked = load.acked()
    problems = []
    for p in range(PARTITIONS):
        problems += check_partition(
            p, acked.get(p, []), records[p], high_watermark=high_watermarks[p]
        )
    return problems


def _consume(
    bootstrap: str,
    topic: str,
    high_watermarks: dict[int, int],
    timeout_s: float = CONSUME_TIMEOUT_S,
) -> dict[int, list[tuple[int, bytes | None]]]:
    """Every record of the partitions in ``high_watermarks`` below their watermark."""
    consumer = Consumer(
        bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=5000
    )
    records: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in high_watermarks}
    try:
        tps = [TopicPartition(topic, p) for p in high_watermarks]
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)

        def done() -> bool:
            for record in consumer.poll(timeout_ms=200):
                if record.offset < high_watermarks[record.partition]:
                    records[record.partition].append((record.offset, record.value))
            return all(consumer.position(tp) >= high_watermarks[tp.partition] for tp in tps)

        wait_until(done, timeout_s, f"consuming up to the high watermarks {high_watermarks}")
    finally:
        consumer.close()
    return records


def _check_replicas(region: ReplicatedRegion, high_watermarks: dict[int, int]) -> list[str]:
    problems = []
    for p, state in sorted(region.states().items()):
        reads = [
            read_replica(b, region.partition_dir(b, p), high_watermarks[p]) for b in state.replicas
        ]
        problems += compare_replicas(p, reads, high_watermarks[p])
        sizes = {r.broker_id: len(r.data) for r in reads}
        print(f"p{p}: high watermark {high_watermarks[p]}, replica bytes {sizes}")
    return problems
