"""Shared pieces of the broker benchmark: results, tables, pacing and cleanup.

``Cleanup`` owns every process and temporary directory a run starts, and tears them down
on any exit (normal end, an error, Ctrl-C or SIGTERM). Servers are started through
``setpriv --pdeathsig KILL`` where available, so they die with the benchmark even when it
is killed outright.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import multiprocessing.process
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

MB = 1e6
KiB = 1024
MiB = 1024 * KiB

# A latency record's value starts with (sequence number, due time in CLOCK_MONOTONIC ns);
# CLOCK_MONOTONIC is one clock for every process of the machine.
STAMP = struct.Struct(">qq")
STOP_TIMEOUT_S = 15.0


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- results ------------------------------------------------------------------------------
@dataclass
class Throughput:
    """One throughput case: ``records`` of ``value_bytes`` moved in ``seconds``."""

    system: str
    workload: str  # produce | consume
    mode: str  # how: SDK, prebuilt, pipelined XADD, ...
    value_bytes: int
    setting: str  # durability / fsync setting
    records: int = 0
    seconds: float = 0.0
    note: str = ""
    other_cpus: float = math.nan  # CPUs used by processes outside the benchmark meanwhile

    @property
    def records_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_s(self) -> float:
        return self.records * self.value_bytes / self.seconds / MB if self.seconds else 0.0


@dataclass
class Latency:
    """End-to-end latencies (ns) of the records after the warm-up."""

    system: str
    mode: str
    setting: str
    rate: int
    samples_ns: list[int] = field(default_factory=list)
    sent: int = 0
    received: int = 0
    warmup: int = 0
    sender_note: str = ""
    other_cpus: float = math.nan

    def percentile_ms(self, p: float) -> float:
        ordered = sorted(self.samples_ns)
        return percentile(ordered, p) / 1e6 if ordered else math.nan

    @property
    def lost(self) -> int:
        return self.sent - self.received


def percentile(sorted_values: Sequence[int], p: float) -> int:
    """Nearest-rank percentile of an ascending, non-empty sequence."""
    rank = math.ceil(p * len(sorted_values) - 1e-9)
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


# -- output -------------------------------------------------------------------------------
def num(x: float, digits: int = 0) -> str:
    if x != x:  # NaN: nothing measured
        return "-"
    return f"{x:,.{digits}f}"


def ms(x: float) -> str:
    return "-" if x != x else f"{x:.2f}"


def ratio(a: float, b: float) -> str:
    if not a or not b or a != a or b != b:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.3f}x"


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def size_label(n: int) -> str:
    return f"{n // KiB} KiB" if n >= KiB and n % KiB == 0 else f"{n} B"


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    if not rows:
        return
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        first = f"{cells[0]:<{widths[0]}}"
        rest = (f"{cell:>{w}}" for cell, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    print(f"\n{title}")
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))
    sys.stdout.flush()


def note(text: str) -> None:
    print(f"  {text}")


# -- latency records ----------------------------------------------------------------------
def stamped_value(seq: int, due_ns: int, size: int) -> bytes:
    head = STAMP.pack(seq, due_ns)
    return head + b"x" * max(0, size - len(head))


def read_stamp(value: bytes) -> tuple[int, int]:
    seq, due_ns = STAMP.unpack_from(value)
    return seq, due_ns


class Pacer:
    """Yields ``(seq, stamp_ns)`` for ``count`` sends at ``rate``/s, sleeping until each is due.

    The stamp is the earlier of the due time and now: a sender held back by the system
    under test (a synchronous call that stalls) stamps its late records with their due
    times, so the stall shows up in the latencies instead of hiding (coordinated omission).
    Sleeps overshoot (~150 us on this VM); the loop learns by how much and wakes that much
    earlier, and a record sent before its due time carries the time it was sent.
    """

    def __init__(self, rate: int, count: int) -> None:
        self.rate = rate
        self.count = count
        self.max_behind_ns = 0
        self.late = 0  # sends more than 1 ms after their due time

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[tuple[int, int]]]:
        """Every record due by now, together (at least one: sleeps until the next is due);
        for a sender that pipelines whatever accumulated while it waited for a reply."""
        start = time.monotonic_ns() + 20_000_000
        step = 1_000_000_000 / self.rate
        overshoot = 0
        seq = 0
        while seq < self.count:
            due = start + int(seq * step)
            wake = due - overshoot
            delay = wake - time.monotonic_ns()
            if delay > 0:
                time.sleep(delay / 1e9)
                overshoot = (7 * overshoot + max(0, time.monotonic_ns() - wake)) // 8
            now = time.monotonic_ns()
            batch = []
            while seq < self.count and start + int(seq * step) <= max(now, due):
                due = start + int(seq * step)
                self.max_behind_ns = max(self.max_behind_ns, now - due)
                self.late += now - due > 1_000_000
                batch.append((seq, min(due, now)))
                seq += 1
            yield batch

    def report(self, sent: int, error: str = "") -> dict[str, Any]:
        """What a paced producer sends back: how far behind its schedule it fell."""
        text = (
            f"sender max {self.max_behind_ns / 1e6:.1f} ms behind schedule, "
            f"{self.late} of {sent} sends > 1 ms late"
        )
        return {"sent": sent, "note": f"{text}; error: {error}" if error else text}


@dataclass
class LatencyCollector:
    """Receives stamped records; keeps the latencies of those past the warm-up."""

    expected: int
    warmup: int
    samples_ns: list[int] = field(default_factory=list)
    seen: int = 0
    last_seq: int = -1

    def add(self, value: bytes, now_ns: int | None = None) -> None:
        seq, due_ns = read_stamp(value)
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        self.seen += 1
        self.last_seq = max(self.last_seq, seq)
        if seq >= self.warmup:
            self.samples_ns.append(now_ns - due_ns)

    @property
    def done(self) -> bool:
        return self.seen >= self.expected or self.last_seq >= self.expected - 1

    def into(self, result: Latency, sent: int) -> Latency:
        result.samples_ns = self.samples_ns
        result.sent = sent
        result.received = self.seen
        result.warmup = self.warmup
        return result


# -- processes and directories ------------------------------------------------------------
class Stoppable(Protocol):
    def stop(self, timeout_s: float = ...) -> int: ...


def pdeathsig_prefix() -> list[str]:
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


class Cleanup:
    """Every process and temporary directory of a run, torn down by ``close()``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._processes: list[subprocess.Popen[bytes]] = []
        self._children: list[multiprocessing.process.BaseProcess] = []
        self._stoppables: list[Stoppable] = []
        self._dirs: list[Path] = []

    def mkdtemp(self, prefix: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.root))
        self._dirs.append(path)
        return path

    def popen(self, args: Sequence[str], *, log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [*pdeathsig_prefix(), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._processes.append(proc)
        return proc

    def adopt(self, thing: Stoppable) -> None:
        self._stoppables.append(thing)

    def spawn(self, target: Callable[..., Any], *args: Any) -> multiprocessing.process.BaseProcess:
        """Run ``target(*args)`` in a fresh interpreter (spawn: no inherited threads)."""
        child = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
        child.start()
        self._children.append(child)
        return child

    def stop_process(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc in self._processes:
            self._processes.remove(proc)

    def close(self) -> None:
        for child in self._children:
            if child.is_alive():
                child.kill()
            child.join(5)
        for thing in reversed(self._stoppables):
            try:
                thing.stop(STOP_TIMEOUT_S)
            except Exception as exc:  # cleanup goes on; the failure is reported
                progress(f"cleanup: stopping {thing!r} failed: {exc}")
        for proc in reversed(self._processes):
            self.stop_process(proc)
        for path in self._dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._children.clear()
        self._stoppables.clear()
        self._dirs.clear()

    def live_pids(self) -> list[int]:
        """Processes of this run still running (their CPU is not in ``os.times`` yet)."""
        pids = [p.pid for p in self._processes if p.poll() is None]
        pids += [c.pid for c in self._children if c.is_alive() and c.pid is not None]
        for thing in self._stoppables:
            process = getattr(thing, "process", None)
            if process is not None and process.poll() is None:
                pids.append(process.pid)
        return pids

    def __enter__(self) -> Cleanup:
        global _ACTIVE
        signal.signal(signal.SIGTERM, _raise_interrupt)
        _ACTIVE = self
        return self

    def __exit__(self, *exc: object) -> None:
        global _ACTIVE
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _ACTIVE = None
        self.close()


_ACTIVE: Cleanup | None = None


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done in {timeout_s:.0f} s")
        time.sleep(0.02)


# -- process figures ----------------------------------------------------------------------
def proc_status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_limit(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return f"{soft} (hard {hard})"
    return "?"


# -- what a run measures ------------------------------------------------------------------
VALUE_SIZES = (100, 1024)


@dataclass(frozen=True)
class Plan:
    """Sizes of one run; every case also stops after ``max_case_s``."""

    records: int  # per 100 B produce/consume case; 1 KiB cases move a quarter
    prebuilt_records: int  # per 100 B prebuilt-batch produce case
    max_case_s: float
    latency_rate: int
    latency_warmup_s: float
    latency_s: float
    partitions: int
    active_partitions: int

    def records_for(self, value_bytes: int, *, prebuilt: bool = False) -> int:
        base = self.prebuilt_records if prebuilt else self.records
        return base if value_bytes < KiB else max(1, base // 4)

    @property
    def latency_records(self) -> int:
        return int(self.latency_rate * (self.latency_warmup_s + self.latency_s))

    @property
    def latency_warmup_records(self) -> int:
        return int(self.latency_rate * self.latency_warmup_s)


# -- latency runs -------------------------------------------------------------------------
CHILD_START_S = 15.0  # a spawned interpreter importing grpc may take a few seconds
DRAIN_S = 10.0
LATENCY_VALUE_BYTES = 100


def measure_latency(
    cleanup: Cleanup,
    result: Latency,
    plan: Plan,
    producer: Callable[..., None],
    producer_args: tuple[Any, ...],
    consume: Callable[[LatencyCollector, float], None],
) -> Latency:
    """Run ``producer(*producer_args, rate, count, value_bytes, queue)`` in a child process
    and ``consume(collector, deadline)`` here; the child reports ``{"sent", "note"}``."""
    queue: Any = multiprocessing.get_context("spawn").Queue()
    collector = LatencyCollector(plan.latency_records, plan.latency_warmup_records)
    args = (*producer_args, plan.latency_rate, plan.latency_records, LATENCY_VALUE_BYTES, queue)
    with stopwatch(result):
        child = cleanup.spawn(producer, *args)
        budget = plan.latency_warmup_s + plan.latency_s + CHILD_START_S + DRAIN_S
        consume(collector, time.monotonic() + budget)
        try:
            report = queue.get(timeout=DRAIN_S)
        except Exception:
            report = {"sent": 0, "note": "the producer reported nothing"}
        child.join(DRAIN_S)
    result.sender_note = str(report.get("note", ""))
    return collector.into(result, int(report.get("sent", 0)))


@contextlib.contextmanager
def stopwatch(result: Throughput | Latency) -> Iterator[None]:
    """Times the block into ``result.seconds`` (throughputs) and notes in
    ``result.other_cpus`` how busy processes outside the benchmark kept the machine."""
    busy, ours = cpu_seconds()
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - started
        busy_end, ours_end = cpu_seconds()
        if isinstance(result, Throughput):
            result.seconds = elapsed
        result.other_cpus = max(0.0, (busy_end - busy) - (ours_end - ours)) / max(elapsed, 1e-9)


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds the whole machine spent busy, CPU seconds of this benchmark: this
    process, its reaped children and the processes of the active ``Cleanup``) so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    ticks = os.sysconf("SC_CLK_TCK")
    mine = os.times()
    ours = mine.user + mine.system + mine.children_user + mine.children_system
    for pid in _ACTIVE.live_pids() if _ACTIVE is not None else ():
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ours += (int(stat[11]) + int(stat[12])) / ticks
    return (user + nice + system + irq + softirq + steal) / ticks, ours
