"""The chaos loop: one fault at a time on a random broker, chosen by its role.

Each fault is one of
- ``kill``: SIGKILL the broker's process (the controller's local provisioner starts it
  again at its next tick, on the same data directory and port);
- ``down``: SIGKILL it and keep it down for ``pause_s`` seconds (its data directory's
  lock is held, so each restart the provisioner tries fails at once) — a host that stays
  down: the controller must move leadership to a follower; then it comes back;
- ``pause``: SIGSTOP it for ``pause_s`` seconds (2.5-4 s: longer than the test's controller
  takes to declare a silent broker dead), then SIGCONT — a network partition as
  the rest of the cluster sees it: it neither answers nor sends, then comes back with
  whatever it believed before;

aimed at the ``leader`` of a random partition or at a ``follower`` of one (a replica in
its ISR that does not lead it). After each fault the loop waits until the cluster has
recovered (every broker running and ready, every partition led with a full ISR, and
every partition has acknowledged a record sent after the fault) and records how long
writes to each partition the broker led took to resume: from the fault to the first
acknowledgement of a record sent after it.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from dataclasses import dataclass, field

from tests.integration.replication.load import ProducerLoad
from tests.integration.replication.region import PartitionState, ReplicatedRegion

RECOVERY_TIMEOUT_S = 60.0


@dataclass
class Fault:
    number: int
    kind: str  # kill | down | pause
    role: str  # leader | follower (of ``partition``)
    partition: int
    broker_id: int
    led: list[int]  # partitions the broker led when the fault began
    at: float  # monotonic
    pause_s: float = 0.0
    resumed_s: dict[int, float] = field(default_factory=dict)  # partition -> s to first ack
    recovered_s: float = 0.0  # until the whole cluster was back in sync
    after: dict[int, tuple[int | None, int]] = field(default_factory=dict)  # p -> leader, epoch

    @property
    def failover_s(self) -> float | None:
        """Writes to the partitions it led resumed after this long (the slowest one)."""
        led = [self.resumed_s[p] for p in self.led if p in self.resumed_s]
        return max(led) if led else None

    def describe(self) -> str:
        held = f" for {self.pause_s:.1f} s" if self.pause_s else ""
        led = ",".join(f"p{p}" for p in self.led) or "none"
        failover = self.failover_s
        took = "" if failover is None else f"; failover (first ack on p{self.led}) {failover:.2f} s"
        stalls = " ".join(f"p{p}:{s:.2f}" for p, s in sorted(self.resumed_s.items()))
        moved = " ".join(
            f"p{p}->{self.after[p][0]}@e{self.after[p][1]}" for p in self.led if p in self.after
        )
        return (
            f"fault {self.number:2d}: {self.kind:5s}{held} broker {self.broker_id} "
            f"({self.role} of p{self.partition}; led {led}){took}; "
            f"first ack after the fault per partition (s): {stalls}; "
            f"cluster in sync after {self.recovered_s:.2f} s; its partitions now: {moved or '-'}"
        )


class Chaos:
    """Runs ``faults`` faults on ``region`` while ``load`` produces; see the module docstring."""

    def __init__(
        self,
        region: ReplicatedRegion,
        load: ProducerLoad,
        *,
        seed: int,
        replicated: bool = True,
        pause_s: tuple[float, float] = (2.5, 4.0),
    ) -> None:
        self.region, self.load = region, load
        self.rng = random.Random(seed)
        self.replicated = replicated
        self.pause_s = pause_s
        self.faults: list[Fault] = []
        self.paused: set[int] = set()  # pids stopped now: the teardown resumes them

    def run(self, faults: int) -> list[Fault]:
        for number in range(1, faults + 1):
            fault = self._inject(number)
            self._recover(fault)
            print(fault.describe(), flush=True)
            self.faults.append(fault)
        return self.faults

    # -- one fault --------------------------------------------------------------------------
    def _inject(self, number: int) -> Fault:
        states = self.region.states()
        kind = self.rng.choice(["kill", "down", "pause"])
        role = self.rng.choice(["leader", "follower"]) if self.replicated else "leader"
        partition = self.rng.randrange(len(states))
        target = self._target(states[partition], role)
        led = sorted(p for p, s in states.items() if s.leader == target)
        pid = self.region.pid(target)
        assert pid is not None, f"broker {target} is not running before fault {number}"
        fault = Fault(number, kind, role, partition, target, led, time.monotonic())
        if kind == "kill":
            os.kill(pid, signal.SIGKILL)
        elif kind == "down":
            fault.pause_s = self.rng.uniform(*self.pause_s)
            os.kill(pid, signal.SIGKILL)
            with self.region.held_down(target):
                time.sleep(fault.pause_s)
        else:
            fault.pause_s = self.rng.uniform(*self.pause_s)
            self._pause(pid, fault.pause_s)
        return fault

    def _target(self, state: PartitionState, role: str) -> int:
        if role == "leader":
            assert state.leader is not None, f"no leader: {state}"
            return state.leader
        followers = sorted(set(state.isr) - {state.leader}) or sorted(
            set(state.replicas) - {state.leader}
        )
        assert followers, f"no follower to fault: {state}"
        return self.rng.choice(followers)

    def _pause(self, pid: int, seconds: float) -> None:
        os.kill(pid, signal.SIGSTOP)
        self.paused.add(pid)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)
            self.paused.discard(pid)

    # -- recovery ---------------------------------------------------------------------------
    def _recover(self, fault: Fault) -> None:
        """Wait until the cluster is whole again and every partition took a write sent
        after the fault; fail with the cluster's state otherwise."""
        partitions = range(self.region.topic.partitions if self.region.topic else 0)
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while True:
            for p in partitions:
                if p not in fault.resumed_s:
                    acked_at = self.load.first_ack_after(p, fault.at)
                    if acked_at is not None:
                        fault.resumed_s[p] = acked_at - fault.at
            if len(fault.resumed_s) == len(partitions) and self.region.all_in_sync():
                fault.recovered_s = time.monotonic() - fault.at
                states = self.region.states()
                fault.after = {p: (s.leader, s.leader_epoch) for p, s in states.items()}
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the cluster did not recover within {RECOVERY_TIMEOUT_S} s of "
                    f"{fault.describe()}\npartitions: {self.region.states()}\n"
                    f"brokers: {[(b.broker_id, b.phase, b.pid) for b in self.region.brokers()]}"
                )
            time.sleep(0.1)

    def resume_all(self) -> None:
        """Teardown: SIGCONT anything still stopped."""
        for pid in list(self.paused):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            self.paused.discard(pid)


def summary(faults: list[Fault]) -> str:
    """Failover times of the faults that hit a leader: count, p50, max."""
    times = sorted(f.failover_s for f in faults if f.failover_s is not None)
    kinds = {k: sum(1 for f in faults if f.kind == k) for k in ("kill", "down", "pause")}
    roles = {r: sum(1 for f in faults if f.role == r) for r in ("leader", "follower")}
    if not times:
        return f"{len(faults)} faults {kinds} {roles}; none hit a partition leader"
    p50 = times[len(times) // 2]
    return (
        f"{len(faults)} faults {kinds} {roles}; failover of the partitions a faulted broker "
        f"led: n={len(times)} p50 {p50:.2f} s max {times[-1]:.2f} s"
    )
