"""Many partitions on one broker: memory, descriptors, restart time and spread produce.

The broker is started with a limit of ``FD_LIMIT`` open files, soft and hard (the aim's
budget), so a broker that needs more fails visibly instead of borrowing the machine's
larger limit.
Steps: start an empty broker; create ``plan.partitions`` idle partitions of one topic;
stop it with SIGTERM and start it again; kill it with SIGKILL and start it again; then
produce prebuilt batches to one partition of another topic and, round-robin, to
``plan.active_partitions`` of the idle ones (one ~1 MB batch per request, the same
batches, the same durability), and compare the two.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from benchkit import (
    Cleanup,
    Plan,
    Throughput,
    fd_limit,
    open_fds,
    proc_status_kib,
    progress,
    stopwatch,
)
from brokerload import MERIDIAN, MeridianBroker, build_batches, produce_prebuilt

FD_LIMIT = 4096
TOPIC = "bench.many"
SINGLE_TOPIC = "bench.single"
DURABILITY = "interval"


@dataclass
class Snapshot:
    step: str
    seconds: float  # how long the step took
    rss_kib: int
    hwm_kib: int
    fds: int


@dataclass
class PartitionsResult:
    partitions: int
    active: int
    fd_limit: str = "?"
    stop_s: float = float("nan")  # SIGTERM until the process exited
    snapshots: list[Snapshot] = field(default_factory=list)
    single: Throughput | None = None
    spread: Throughput | None = None
    error: str = ""

    def seconds(self, step: str) -> float:
        return next((s.seconds for s in self.snapshots if s.step == step), float("nan"))

    @property
    def max_rss_kib(self) -> int:
        return max((s.rss_kib for s in self.snapshots), default=0)

    @property
    def max_fds(self) -> int:
        return max((s.fds for s in self.snapshots), default=0)


def snapshot(broker: MeridianBroker, step: str, seconds: float) -> Snapshot:
    pid = broker.pid
    shot = Snapshot(
        step, seconds, proc_status_kib(pid, "VmRSS"), proc_status_kib(pid, "VmHWM"), open_fds(pid)
    )
    progress(f"  {step}: {seconds:.1f} s, RSS {shot.rss_kib / 1024:.0f} MiB, {shot.fds} fds")
    return shot


def run_partitions(cleanup: Cleanup, root: Path, plan: Plan) -> PartitionsResult:
    result = PartitionsResult(plan.partitions, plan.active_partitions)
    started = time.perf_counter()
    broker = MeridianBroker(cleanup, root, fd_limit=FD_LIMIT)
    try:
        result.fd_limit = fd_limit(broker.pid)
        result.snapshots.append(
            snapshot(broker, "empty broker started", time.perf_counter() - started)
        )
        _create_and_restart(broker, plan, result)
        _produce_spread(broker, plan, result)
    except Exception as exc:  # the figures so far are still worth printing
        result.error = f"{type(exc).__name__}: {exc}"
        progress(f"partitions: {result.error}")
    finally:
        broker.close()
        broker.stop()
    return result


def _create_and_restart(broker: MeridianBroker, plan: Plan, result: PartitionsResult) -> None:
    progress(f"partitions: creating {plan.partitions:,} partitions")
    started = time.perf_counter()
    broker.create_topic(TOPIC, plan.partitions, DURABILITY)
    result.snapshots.append(snapshot(broker, "created", time.perf_counter() - started))
    result.stop_s = broker.stop()
    progress(f"  SIGTERM stop took {result.stop_s:.1f} s")
    start_s = broker.start()
    result.snapshots.append(snapshot(broker, "restart after SIGTERM", start_s))
    broker.kill()
    start_s = broker.start()
    result.snapshots.append(snapshot(broker, "restart after SIGKILL", start_s))


def _produce_spread(broker: MeridianBroker, plan: Plan, result: PartitionsResult) -> None:
    batches = build_batches(100)
    records = plan.records_for(100, prebuilt=True)
    broker.create_topic(SINGLE_TOPIC, 1, DURABILITY)
    progress("partitions: prebuilt batches into one partition")
    single = Throughput(MERIDIAN, "produce", "prebuilt, 1 partition", 100, DURABILITY)
    with stopwatch(single):
        single.records = produce_prebuilt(
            broker.address, [(SINGLE_TOPIC, 0)], batches, records, plan.max_case_s
        )
    result.single = single
    targets = [(TOPIC, p) for p in range(plan.active_partitions)]
    progress(f"partitions: prebuilt batches round-robin over {len(targets):,} partitions")
    spread = Throughput(
        MERIDIAN, "produce", f"prebuilt, {len(targets):,} partitions", 100, DURABILITY
    )
    with stopwatch(spread):
        spread.records = produce_prebuilt(
            broker.address, targets, batches, records, plan.max_case_s
        )
    result.spread = spread
    result.snapshots.append(snapshot(broker, "after the produce runs", spread.seconds))
