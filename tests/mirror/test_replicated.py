"""Leader failover on both sides during the copy, with RF=3 topics (min ISR 2) led by the
test controller of ``tests/support/replication.py`` (no control plane): the leader of
every partition is SIGKILLed, a follower in the ISR elected, the old leader restarted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mirror.support import Background, assert_copied_exactly, produce
from tests.support.mirror import Region, WorkerProcess, link_config, read_all
from tests.support.replication import TestController

TOPIC = "acme.orders"
PARTITIONS = 2


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[dict[str, tuple[Region, TestController]]]:
    started: dict[str, tuple[Region, TestController]] = {}
    try:
        for name in ("east", "west"):
            region = Region.start(tmp_path / name, brokers=3)
            controller = TestController(region.brokers)
            started[name] = (region, controller)
            controller.create_topic(TOPIC, [1, 2, 3], partitions=PARTITIONS, min_isr=2)
            controller.start()
        yield started
    finally:
        for region, controller in started.values():
            controller.stop()
            region.stop()


def _fail_over(region: Region, controller: TestController) -> None:
    """Kill broker 1 (every partition's leader), elect broker 2, bring 1 back in sync."""
    region.brokers[0].kill()
    for p in range(PARTITIONS):
        controller.elect(TOPIC, p, leader=2, isr=[2, 3])
    region.brokers[0].start()
    for p in range(PARTITIONS):
        controller.wait_for_isr(TOPIC, p, [1, 2, 3])


@pytest.mark.slow
def test_exact_across_leader_failover_in_the_source_and_in_the_target(
    replicated: dict[str, tuple[Region, TestController]],
    workers: list[WorkerProcess],
    tmp_path: Path,
) -> None:
    (east, east_controller), (west, west_controller) = replicated["east"], replicated["west"]
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 0, 5_000)
    worker = WorkerProcess(tmp_path / "worker", link_config(east, west, {TOPIC: PARTITIONS}))
    workers.append(worker)
    with Background(east.bootstrap, TOPIC, PARTITIONS, "east", 5_000) as background:
        worker.start()
        worker.wait_for(lambda s: sum(p["copied_records"] for p in s["partitions"]) > 0)
        _fail_over(east, east_controller)
        worker.wait_for(lambda s: all(p["lag_records"] < 2_000 for p in s["partitions"]))
        _fail_over(west, west_controller)
        worker.wait_for(lambda s: all(p["lag_records"] < 2_000 for p in s["partitions"]))
    worker.wait_caught_up(timeout_s=120)
    copied = assert_copied_exactly(
        read_all(east.bootstrap, TOPIC, PARTITIONS),
        read_all(west.bootstrap, TOPIC, PARTITIONS),
        "east",
    )
    assert copied == background.next
