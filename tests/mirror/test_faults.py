"""Broker failures on either side during the copy (single-broker regions, SIGKILL and
restart: the region's only broker is the leader), lag while the target is down, and
resumption from a checkpoint when the target holds much local traffic."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dataplane.client import Admin, Consumer, TopicPartition
from dataplane.storage.log import PartitionLog
from mirror.config import Checkpoint
from mirror.resume import find_resume
from tests.mirror.support import Background, assert_copied_exactly, produce
from tests.support.mirror import Region, WorkerProcess, link_config, origin_of, read_all

TOPIC = "acme.orders"
PARTITIONS = 2


@pytest.mark.slow
def test_exact_across_source_and_target_broker_kills_with_lag_while_the_target_is_down(
    regions: tuple[Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    east, west = regions
    for region in regions:
        region.create_topic(TOPIC, PARTITIONS)
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 0, 10_000)
    worker = WorkerProcess(tmp_path / "worker", link_config(east, west, {TOPIC: PARTITIONS}))
    workers.append(worker)
    worker.start()
    worker.wait_for(lambda s: sum(p["copied_records"] for p in s["partitions"]) > 0)
    east.brokers[0].restart()  # SIGKILL mid-copy, back on the same port and data
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 10_000, 5_000)
    before_caught_up = time.time()
    worker.wait_caught_up()
    west.brokers[0].kill()
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 15_000, 5_000)
    lagging = worker.wait_for(
        lambda s: all(p["lag_records"] > 0 and p["lag_seconds"] > 0 for p in s["partitions"])
    )
    assert all(p["source_end_offset"] > p["next_source_offset"] for p in lagging["partitions"])
    # The records' CreateTime is in 2023: their age is years, but every record older than
    # the last caught-up moment (after ``before_caught_up``) was copied by then.
    bound = time.time() - before_caught_up + 1
    assert all(p["lag_seconds"] <= bound for p in lagging["partitions"]), (bound, lagging)
    west.brokers[0].start()
    with Background(east.bootstrap, TOPIC, PARTITIONS, "east", 20_000) as background:
        worker.wait_for(lambda s: all(p["lag_records"] < 3000 for p in s["partitions"]))
        west.brokers[0].restart()  # the target's leader killed again, mid-copy
        worker.wait_for(lambda s: sum(p["copied_records"] for p in s["partitions"]) > 0)
    worker.wait_caught_up()
    copied = assert_copied_exactly(
        read_all(east.bootstrap, TOPIC, PARTITIONS), read_all(west.bootstrap, TOPIC, PARTITIONS),
        "east",
    )  # fmt: skip
    assert copied == background.next


def _copy_stamped(bootstrap: str, partition: int, source_offsets: range) -> None:
    """Records as a worker from east would have written them."""
    from dataplane.client import Producer

    records = [
        (None, b"copy", [("x-origin-region", b"east"), ("x-origin-offset", str(o).encode())])
        for o in source_offsets
    ]
    with Producer(bootstrap, acks="all", route_lanes=False) as producer:
        producer.send_batch(TOPIC, records, partition=partition).result(30)


def test_the_backward_scan_stops_at_the_checkpoint(regions: tuple[Region, Region]) -> None:
    _, west = regions
    west.create_topic(TOPIC, 1)
    _copy_stamped(west.bootstrap, 0, range(0, 500))
    produce(west.bootstrap, TOPIC, 1, "west", 0, 20_000)  # local traffic after the copies
    tp = TopicPartition(TOPIC, 0)
    with Admin(west.bootstrap) as admin:
        end = admin.list_offsets({tp: "latest"})[tp][0]
    reader = Consumer(west.bootstrap, auto_offset_reset="none", enable_auto_commit=False)
    try:
        checked = find_resume(reader, tp, "east", (0, end), Checkpoint(400, 400))
        assert (checked.next_source_offset, checked.target_offset) == (500, 499)
        assert checked.scanned <= end - 400
        whole = find_resume(reader, tp, "east", (0, end), None)
        assert (whole.next_source_offset, whole.target_offset) == (500, 499)
        assert find_resume(reader, tp, "west", (0, end), None).next_source_offset is None
        # nothing from east after the checkpoint's place: its own source offset + 1
        past = find_resume(reader, tp, "east", (0, end), Checkpoint(900, end - 10))
        assert past.next_source_offset == 901
    finally:
        reader.close()


def test_a_worker_resumes_from_its_checkpoint_behind_much_local_traffic(
    regions: tuple[Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    east, west = regions
    for region in regions:
        region.create_topic(TOPIC, PARTITIONS)
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 0, 4_000)
    worker = WorkerProcess(tmp_path / "worker", link_config(east, west, {TOPIC: PARTITIONS}))
    workers.append(worker)
    worker.start()
    status = worker.wait_caught_up()
    assert worker.terminate() == 0
    produce(west.bootstrap, TOPIC, PARTITIONS, "west", 0, 40_000)
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 4_000, 2_000)
    newest = {(p["topic"], p["partition"]): p for p in status["points"]}  # newest last
    worker.config["checkpoints"] = {
        f"{topic}/{p}": {"source_offset": pt["source_offset"], "target_offset": pt["target_offset"]}
        for (topic, p), pt in newest.items()
    }
    worker.config["generation"] = 2
    worker.start()
    worker.wait_caught_up()
    # the second start read the target back to the checkpoint, not to its log start
    second = worker.log_text().split("--- start 1")[1]
    for p in range(PARTITIONS):
        line = next(x for x in second.splitlines() if f"{TOPIC}/{p}: target" in x)
        scanned = int(line.rsplit("scanned ", 1)[1].rstrip(")"))
        checkpoint = worker.config["checkpoints"][f"{TOPIC}/{p}"]["target_offset"]
        assert 0 < scanned <= 2_000 + 20_000 - checkpoint
    assert (
        assert_copied_exactly(
            read_all(east.bootstrap, TOPIC, PARTITIONS),
            read_all(west.bootstrap, TOPIC, PARTITIONS),
            "east",
        )
        == 6_000
    )


def test_records_removed_by_retention_before_their_copy_are_counted(
    regions: tuple[Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """The source's log start moved past the resume point while the worker was down:
    the copy goes on from the log start and the gap is counted and reported."""
    east, west = regions
    for region in regions:
        region.create_topic(TOPIC, 1)
    produce(east.bootstrap, TOPIC, 1, "east", 0, 1_000)
    worker = WorkerProcess(tmp_path / "worker", link_config(east, west, {TOPIC: 1}))
    workers.append(worker)
    worker.start()
    worker.wait_caught_up()
    assert worker.terminate() == 0
    produce(east.bootstrap, TOPIC, 1, "east", 1_000, 2_000)
    broker = east.brokers[0]
    broker.terminate()
    log = PartitionLog.open(broker.data_dir / f"{TOPIC}-0")
    try:
        assert log.advance_log_start_offset(2_000) == 2_000  # as retention would
    finally:
        log.close()
    broker.start()
    worker.start()
    status = worker.wait_for(
        lambda s: s["partitions"][0]["next_source_offset"] == 3_000, timeout_s=60
    )
    partition = status["partitions"][0]
    assert partition["records_lost_to_retention"] == 1_000
    assert "retention" in partition["error"]
    assert partition["state"] == "error"
    copies = [origin_of(r)[1] for r in read_all(west.bootstrap, TOPIC, 1)[0]]
    assert copies == [*range(1_000), *range(2_000, 3_000)]
