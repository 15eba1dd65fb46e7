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
- ``down2`` / ``pause2``: ``down`` or ``pause`` of two brokers at once (the chosen one and
  another at random), two replicas of every partition: the controller shrinks the ISRs
  to the one left, below ``min_insync_replicas=2``, so acks=all must answer no record
  sent meanwhile before one of the two is back (``violations``, checked with
  ``verify.acked_while_short``); a replicated run has one of each;

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
from tests.integration.replication.verify import acked_while_short

RECOVERY_TIMEOUT_S = 60.0
SINGLE_KINDS = ("kill", "down", "pause")
DOUBLE_KINDS = ("down2", "pause2")
KINDS = SINGLE_KINDS + DOUBLE_KINDS


@dataclass
class Fault:
    number: int
    kind: str  # kill | down | pause | down2 | pause2
    role: str  # leader | follower (of ``partition``)
    partition: int
    broker_id: int
    led: list[int]  # partitions the broker led when the fault began
    at: float  # monotonic
    pause_s: float = 0.0
    second: int | None = None  # the other broker of a two-broker fault
    back_at: float = 0.0  # monotonic: when the brokers came back (pause and down kinds)
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
        brokers = f"broker {self.broker_id}"
        if self.second is not None:
            brokers = f"brokers {self.broker_id},{self.second}"
        led = ",".join(f"p{p}" for p in self.led) or "none"
        failover = self.failover_s
        took = "" if failover is None else f"; failover (first ack on p{self.led}) {failover:.2f} s"
        stalls = " ".join(f"p{p}:{s:.2f}" for p, s in sorted(self.resumed_s.items()))
        moved = " ".join(
            f"p{p}->{self.after[p][0]}@e{self.after[p][1]}" for p in self.led if p in self.after
        )
        return (
            f"fault {self.number:2d}: {self.kind:6s}{held} {brokers} "
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
        self.violations: list[str] = []  # acks=all answered while two replicas were down

    def run(self, faults: int) -> list[Fault]:
        for number, kind in enumerate(self._kinds(faults), start=1):
            fault = self._inject(number, kind)
            self._recover(fault)
            if fault.second is not None:
                self.violations += acked_while_short(
                    self.load.acked(), fault.at, fault.back_at, f"fault {number}"
                )
            print(fault.describe(), flush=True)
            self.faults.append(fault)
        return self.faults

    def _kinds(self, faults: int) -> list[str]:
        """A kind per fault: single-broker kinds at random, and when replicated one of
        each two-broker kind at a random place -- two replicas down is what min ISR
        exists for; no more, as each takes about twice as long as a single fault."""
        kinds = [self.rng.choice(SINGLE_KINDS) for _ in range(faults)]
        if not self.replicated or faults < 2:
            return kinds
        doubles = list(DOUBLE_KINDS)
        for index, double in zip(
            self.rng.sample(range(faults), len(doubles)), doubles, strict=True
        ):
            kinds[index] = double
        return kinds

    # -- one fault --------------------------------------------------------------------------
    def _inject(self, number: int, kind: str) -> Fault:
        states = self.region.states()
        role = self.rng.choice(["leader", "follower"]) if self.replicated else "leader"
        partition = self.rng.randrange(len(states))
        target = self._target(states[partition], role)
        targets = [target]
        if kind in DOUBLE_KINDS:
            others = sorted({b.broker_id for b in self.region.brokers()} - {target})
            targets.append(self.rng.choice(others))
        led = sorted(p for p, s in states.items() if s.leader in targets)
        pids = [self._pid(b, number) for b in targets]
        fault = Fault(number, kind, role, partition, target, led, time.monotonic())
        fault.second = targets[1] if len(targets) > 1 else None
        if kind == "kill":
            os.kill(pids[0], signal.SIGKILL)
            return fault
        fault.pause_s = self.rng.uniform(*self.pause_s)
        if kind in ("down", "down2"):
            self._hold_down(targets, pids, fault)
        else:
            self._pause(pids, fault)
        return fault

    def _pid(self, broker_id: int, number: int) -> int:
        pid = self.region.pid(broker_id)
        assert pid is not None, f"broker {broker_id} is not running before fault {number}"
        return pid

    def _hold_down(self, targets: list[int], pids: list[int], fault: Fault) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        with contextlib.ExitStack() as held:
            for broker_id in targets:
                held.enter_context(self.region.held_down(broker_id))
            time.sleep(fault.pause_s)
            fault.back_at = time.monotonic()

    def _target(self, state: PartitionState, role: str) -> int:
        if role == "leader":
            assert state.leader is not None, f"no leader: {state}"
            return state.leader
        followers = sorted(set(state.isr) - {state.leader}) or sorted(
            set(state.replicas) - {state.leader}
        )
        assert followers, f"no follower to fault: {state}"
        return self.rng.choice(followers)

    def _pause(self, pids: list[int], fault: Fault) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            self.paused.add(pid)
        try:
            time.sleep(fault.pause_s)
        finally:
            fault.back_at = time.monotonic()  # before SIGCONT: no answer can precede it
            for pid in pids:
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
    kinds = {k: sum(1 for f in faults if f.kind == k) for k in KINDS}
    roles = {r: sum(1 for f in faults if f.role == r) for r in ("leader", "follower")}
    if not times:
        return f"{len(faults)} faults {kinds} {roles}; none hit a partition leader"
    p50 = times[len(times) // 2]
    return (
        f"{len(faults)} faults {kinds} {roles}; failover of the partitions a faulted broker "
        f"led: n={len(times)} p50 {p50:.2f} s max {times[-1]:.2f} s"
    )
