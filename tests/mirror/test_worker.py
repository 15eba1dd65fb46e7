"""The worker as a real process between two real broker clusters (``east`` -> ``west``):
exact copies across SIGKILL and SIGSTOP of the worker, its status and metrics, a clean
SIGTERM."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.mirror.support import Background, assert_copied_exactly, produce
from tests.support.mirror import Region, WorkerProcess, link_config, read_all

TOPIC = "acme.orders"
LANE_TOPIC = "acme.orders~ppe"
PARTITIONS = 3


def _topics(*regions: Region) -> None:
    for region in regions:
        region.create_topic(TOPIC, PARTITIONS)
        region.create_topic(LANE_TOPIC, PARTITIONS)


@pytest.mark.slow
def test_copies_exactly_once_across_sigkill_and_sigstop_of_the_worker(
    regions: tuple[Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    east, west = regions
    _topics(east, west)
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 0, 20_000)
    produce(east.bootstrap, LANE_TOPIC, PARTITIONS, "lane", 0, 3_000)
    config = link_config(east, west, {TOPIC: PARTITIONS, LANE_TOPIC: PARTITIONS})
    worker = WorkerProcess(tmp_path / "worker", config)
    workers.append(worker)
    with Background(east.bootstrap, TOPIC, PARTITIONS, "east", 20_000) as background:
        worker.start()
        worker.wait_for(lambda s: sum(p["copied_records"] for p in s["partitions"]) > 0)
        worker.kill()  # mid-copy: the producer keeps adding
        worker.start()
        worker.wait_for(lambda s: sum(p["copied_records"] for p in s["partitions"]) > 0)
        worker.pause()  # stopped, unreadable: the provisioner kills it and starts another
        time.sleep(0.5)
        worker.kill()
        worker.config["generation"] = 2
        worker.start()
        assert worker.status()["generation"] == 2
    status = worker.wait_caught_up()
    copied = assert_copied_exactly(
        read_all(east.bootstrap, TOPIC, PARTITIONS), read_all(west.bootstrap, TOPIC, PARTITIONS),
        "east",
    )  # fmt: skip
    assert copied == background.next
    # lane topics are written by their full name, whatever the records' x-lane says
    assert_copied_exactly(
        read_all(east.bootstrap, LANE_TOPIC, PARTITIONS),
        read_all(west.bootstrap, LANE_TOPIC, PARTITIONS),
        "east",
    )
    for p in status["partitions"]:
        assert (p["lag_records"], p["lag_seconds"], p["error"]) == (0, 0, "")
        assert p["next_source_offset"] == p["source_end_offset"]
    assert {(pt["topic"], pt["partition"]) for pt in status["points"]} >= {
        (TOPIC, p) for p in range(PARTITIONS)
    }
    metrics = worker.get("/metrics").decode()
    for name in ("copied_records_total", "copied_bytes_total", "skipped_records_total",
                 "lag_records", "lag_seconds", "errors_total"):  # fmt: skip
        assert f"meridian_mirror_{name}{{" in metrics
    assert 'source_region="east"' in metrics
    assert 'target_region="west"' in metrics
    assert worker.terminate() == 0


def test_status_ready_file_and_points_name_target_offsets_holding_the_copy(
    regions: tuple[Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    east, west = regions
    _topics(east, west)
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 0, 3_000)
    worker = WorkerProcess(tmp_path / "worker", link_config(east, west, {TOPIC: PARTITIONS}))
    workers.append(worker)
    worker.start()
    ready = json.loads((worker.directory / "ready.json").read_text())
    assert ready == {"pid": worker.process.pid, "status_port": worker.status_port,
                     "generation": 1}  # fmt: skip
    status = worker.wait_caught_up()
    assert (status["link_id"], status["pid"]) == (7, worker.process.pid)
    assert (status["from_region"], status["to_region"]) == ("east", "west")
    assert sum(p["copied_records"] for p in status["partitions"]) == 3_000
    target = read_all(west.bootstrap, TOPIC, PARTITIONS)
    for point in status["points"]:
        record = next(r for r in target[point["partition"]] if r.offset == point["target_offset"])
        assert dict(record.headers)["x-origin-offset"] == str(point["source_offset"]).encode()
    assert worker.terminate() == 0


def test_latest_start_position_copies_only_what_comes_after(
    regions: tuple[Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    east, west = regions
    _topics(east, west)
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 0, 900)
    config = link_config(east, west, {TOPIC: PARTITIONS}, start={"position": "latest"})
    worker = WorkerProcess(tmp_path / "worker", config)
    workers.append(worker)
    worker.start()
    worker.wait_for(lambda s: all(p["state"] == "copying" for p in s["partitions"]))
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 900, 300)
    worker.wait_caught_up()
    copies = read_all(west.bootstrap, TOPIC, PARTITIONS)
    assert sorted(r.value for rs in copies.values() for r in rs) == sorted(
        f"east-v{i}".encode() for i in range(900, 1200)
    )


def test_a_config_file_others_can_read_is_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "mirror.json"
    path.write_text("{}")
    path.chmod(0o644)
    result = subprocess.run(
        [sys.executable, "-m", "mirror", "--config", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "readable by others" in result.stderr


def test_a_worker_stops_cleanly_when_its_supervisor_dies(
    regions: tuple[Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """The lifeline (dataplane.lifeline): its write end closing is a SIGTERM."""
    east, west = regions
    _topics(east, west)
    read_end, write_end = os.pipe()
    worker = WorkerProcess(
        tmp_path / "worker",
        link_config(east, west, {TOPIC: PARTITIONS}),
        extra_env={"MERIDIAN_LIFELINE_FD": str(read_end)},
        pass_fds=(read_end,),
    )
    workers.append(worker)
    try:
        worker.start()
        worker.wait_for(lambda s: all(p["state"] == "copying" for p in s["partitions"]))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert worker.process is not None
    assert worker.process.wait(30) == 0
    assert "stopping" in worker.log_text()
