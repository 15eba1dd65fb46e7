"""Replication benchmark: what replicas cost a producer, and how long a failover takes.

    .venv/bin/python bench/replication.py            # ~4 min here
    .venv/bin/python bench/replication.py --quick    # a smoke run, ~1.5 min

Needs Postgres (``./dev services up``: 127.0.0.1:55432); uses its own database
``meridian_bench_replication`` there (dropped and created afresh each run). A real
controller process (the control plane's, with its default timeouts unless
``--session-timeout-s`` says otherwise) starts three brokers through its local
provisioner in a temporary directory; topics are created through the control plane's
``create_topic`` and reconciled onto their replicas. Progress goes to stderr, the report
to stdout.

1. **Produce throughput** with the SDK ``Producer`` (idempotent, ``linger_ms=5``), values
   of ``--value-bytes``, into three partitions (one led by each broker), for RF=1
   ``acks=1``, RF=3 ``acks=1`` and RF=3 ``acks=all`` (``min_insync_replicas=2``), each on
   its own topic; the cases run in rotation, ``--rounds`` times, and the median is
   reported. Records/s and MB/s count from the first send to the end of ``flush``.
2. **Latency**: the same three cases paced at ``--rate`` records/s for a few seconds;
   p50/p99 of send-to-acknowledgement per record.
3. **Failover**: ``--kills`` times, the broker leading a partition of the RF=3 ``acks=all``
   topic is SIGKILLed and kept from starting again (the lock of its data directory is
   held, so the provisioner's restarts fail at once) while a paced producer (300
   records/s, ``request_timeout_ms=5000``) writes to every partition; the failover time
   is from the kill to the first acknowledgement of a record sent after it, on the
   partitions that broker led (the slowest of them), by then led by another broker.
   Then it may start again, and the next fault waits until every ISR is full. Then
   ``--restarts`` plain SIGKILLs (the provisioner restarts the broker at its next tick)
   and ``--pauses`` SIGSTOPs (a hung or partitioned broker: its process still exists, so
   only its silence tells the controller; SIGCONT once writes have resumed).
   ``--failover-only`` runs this part alone; ``--request-timeout-ms`` sets the failover
   producer's (5000 by default, the SDK's own is 30000), which bounds a hung leader's
   stall for a producer that does not notice the leadership move.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BENCH_DB = "meridian_bench_replication"
SERVER = "postgres://meridian:meridian@127.0.0.1:55432"
os.environ["MERIDIAN_DATABASE_URL"] = f"{SERVER}/{BENCH_DB}"
os.environ.setdefault("MERIDIAN_CELERY_BROKER_URL", "redis://127.0.0.1:56379/0")
os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings.testing"
os.environ.setdefault("MERIDIAN_LOG_LEVEL", "WARNING")

PARTITIONS = 3
AIM_RATIO = 0.5  # RF=3 acks=all throughput / RF=1 acks=1 throughput
AIM_FAILOVER_S = 10.0
LATENCY_SAMPLE_EVERY = 8  # throughput runs time every 8th record (a callback costs CPU)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Cpu:
    """CPU-seconds spent during one run: the brokers, this process (the producer), and
    the whole machine (every CPU's busy time, from /proc/stat)."""

    brokers_s: float
    client_s: float
    machine_s: float

    @property
    def others_s(self) -> float:
        return max(0.0, self.machine_s - self.brokers_s - self.client_s)


@dataclass
class Case:
    name: str
    topic: str
    acks: int | str
    replication_factor: int
    seconds: list[float] = field(default_factory=list)  # one per throughput round
    cpu: list[Cpu] = field(default_factory=list)  # one per throughput round
    latencies_ms: list[float] = field(default_factory=list)  # paced run


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, rounds, kills")
    parser.add_argument("--records", type=int, default=100_000, help="per throughput run")
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=1000.0, help="paced latency run, rec/s")
    parser.add_argument("--latency-s", type=float, default=6.0)
    parser.add_argument("--kills", type=int, default=10, help="leader SIGKILLs, kept down")
    parser.add_argument("--restarts", type=int, default=3, help="leader SIGKILLs, restarted")
    parser.add_argument("--pauses", type=int, default=3, help="leader SIGSTOPs (after kills)")
    parser.add_argument(
        "--failover-only", action="store_true", help="skip the throughput and latency runs"
    )
    parser.add_argument(
        "--request-timeout-ms",
        type=float,
        default=5_000,
        help="the failover producer's request_timeout_ms (the SDK's default is 30000)",
    )
    parser.add_argument(
        "--session-timeout-s",
        type=float,
        default=None,
        help="the controller's MERIDIAN_BROKER_SESSION_TIMEOUT_S (default: its own, 6 s)",
    )
    args = parser.parse_args()
    if args.quick:
        args.records, args.rounds, args.kills, args.restarts, args.pauses = 20_000, 1, 3, 1, 1
        args.latency_s = 3.0
    return args


# -- setup ----------------------------------------------------------------------------------
def fresh_database() -> None:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")


def setup_django() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def start_region(root: Path, args: argparse.Namespace) -> Any:
    from controlplane.regions import services
    from tests.integration.replication.region import ADMIN, ReplicatedRegion

    env = {}
    if args.session_timeout_s is not None:
        env = {
            "MERIDIAN_BROKER_SESSION_TIMEOUT_S": str(args.session_timeout_s),
            "MERIDIAN_BROKER_TIMEOUT_S": str(args.session_timeout_s),
            "MERIDIAN_CONTROLLER_TICK_S": "0.2",
            "MERIDIAN_BROKER_RPC_TIMEOUT_S": "1",
            "MERIDIAN_METADATA_PUSH_TIMEOUT_S": "1",
        }
    row = services.create_region(name="bench", actor=ADMIN)
    return ReplicatedRegion(root, row, controller_env=env).start(brokers=3)


def make_cases(region: Any) -> list[Case]:
    specs = [("RF=1 acks=1", "rf1", 1, 1), ("RF=3 acks=1", "rf3-acks1", 1, 3)]
    specs.append(("RF=3 acks=all", "rf3-all", "all", 3))
    cases = []
    for name, topic, acks, rf in specs:
        made = region.create_topic(
            topic, partitions=PARTITIONS, replication_factor=rf, min_isr=min(2, rf)
        )
        cases.append(Case(name, made.full_name, acks, rf))
        log(f"topic {made.full_name}: RF={rf}, leaders {leaders(region, made)}")
    return cases


def leaders(region: Any, topic: Any) -> dict[int, int | None]:
    return {p: s.leader for p, s in sorted(region.states(topic).items())}


# -- 1 and 2: throughput and latency --------------------------------------------------------
def producer_for(bootstrap: str, case: Case) -> Any:
    from dataplane.client import Producer

    producer = Producer(bootstrap, acks=case.acks, linger_ms=5, enable_idempotence=True)
    producer.partitions_for(case.topic)
    return producer


def throughput_run(region: Any, case: Case, records: int, value: bytes) -> None:
    """Time ``records`` records from the first send to the end of ``flush``, and the
    CPU the brokers, the producer and the machine spent meanwhile."""
    producer = producer_for(region.bootstrap, case)
    try:
        before = cpu_now(region)
        started = time.perf_counter()
        for i in range(records):
            producer.send(case.topic, value, partition=i % PARTITIONS)
        producer.flush(300)
        case.seconds.append(time.perf_counter() - started)
        after = cpu_now(region)
        case.cpu.append(Cpu(*(b - a for a, b in zip(before, after, strict=True))))
    finally:
        producer.close(30)


def cpu_now(region: Any) -> tuple[float, float, float]:
    """(brokers, this process, machine busy) CPU-seconds so far."""
    tick = os.sysconf("SC_CLK_TCK")
    brokers = 0.0
    for broker in region.brokers():
        if broker.pid:
            fields = Path(f"/proc/{broker.pid}/stat").read_text().rsplit(")", 1)[1].split()
            brokers += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    busy = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    # user nice system idle iowait irq softirq steal: busy = all but idle and iowait
    machine = sum(int(busy[i]) for i in (0, 1, 2, 5, 6, 7)) / tick
    return brokers, time.process_time(), machine


def latency_run(bootstrap: str, case: Case, rate: float, seconds: float, value: bytes) -> None:
    """Records paced at ``rate``/s; each one's send-to-acknowledgement time, in ms."""
    producer = producer_for(bootstrap, case)
    lock = threading.Lock()
    try:
        started, count = time.perf_counter(), int(rate * seconds)
        for i in range(count):
            due = started + i / rate
            while (now := time.perf_counter()) < due:
                time.sleep(min(0.001, due - now))

            def acked(error: Exception | None, _md: Any, sent: float = now) -> None:
                if error is None:
                    with lock:
                        case.latencies_ms.append((time.perf_counter() - sent) * 1000)

            producer.send(case.topic, value, partition=i % PARTITIONS, on_delivery=acked)
        producer.flush(60)
    finally:
        producer.close(30)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- 3: failover ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Failover:
    kind: str  # down | kill | pause
    broker: int
    led: list[int]
    seconds: float
    leaders_after: dict[int, tuple[int | None, int]]  # led partition -> (leader, epoch)
    moved_s: float | None = None  # when the controller had elected others for all of led

    @property
    def moved(self) -> bool:
        """Whether another broker leads every partition the faulted one led."""
        return all(self.leaders_after[p][0] not in (None, self.broker) for p in self.led)


def failovers(
    region: Any, case: Case, kinds: list[str], request_timeout_ms: float
) -> list[Failover]:
    """One fault after the other on the leader of partition ``i mod 3``: ``down``
    SIGKILLs it and keeps it from restarting until writes have resumed; ``kill``
    SIGKILLs it (the provisioner restarts it at once); ``pause`` SIGSTOPs it until writes
    have resumed, then SIGCONTs it."""
    from tests.integration.replication.load import ProducerLoad
    from tests.integration.replication.region import wait_until

    topic = next(t for t in region.topics if t.full_name == case.topic)
    load = ProducerLoad(region.bootstrap, case.topic, PARTITIONS, acks=case.acks, producers=1,
                        rate_per_s=300.0, request_timeout_ms=request_timeout_ms)  # fmt: skip
    load.start()
    results = []
    try:
        wait_until(lambda: all(load.first_ack_after(p, 0.0) for p in range(PARTITIONS)), 30,
                   "the failover producer's first acknowledgements")  # fmt: skip
        for number, kind in enumerate(kinds):
            wait_until(region.all_in_sync, 120, "every ISR full before a fault")
            states = region.states(topic)
            victim = states[number % PARTITIONS].leader
            led = sorted(p for p, s in states.items() if s.leader == victim)
            took, moved = _fault(region, topic, load, kind, victim, led)
            after = {p: (s.leader, s.leader_epoch) for p, s in region.states(topic).items()}
            result = Failover(kind, victim, led, took, {p: after[p] for p in led}, moved)
            results.append(result)
            log(f"{kind} {number + 1}: broker {victim} (led {led}); writes resumed in "
                f"{took:.2f} s (leaders moved at {_seconds(moved)}); "
                f"leaders now {result.leaders_after}")  # fmt: skip
    finally:
        load.stop()
    log(f"failover producer: {load.sent} sent, {load.count()} acked, {len(load.failures)} failed")
    return results


def _fault(
    region: Any, topic: Any, load: Any, kind: str, victim: int, led: list[int]
) -> tuple[float, float | None]:
    """Seconds from the fault to the first ack on every partition in ``led``, and to the
    controller's election of other leaders for all of them (None: not seen before)."""
    from tests.integration.replication.region import wait_until

    pid = region.pid(victim)
    at = time.monotonic()
    moved: list[float] = []

    def resumed() -> float | None:
        if not moved and all(region.states(topic)[p].leader != victim for p in led):
            moved.append(time.monotonic() - at)
        return _resumed(load, led, at)

    os.kill(pid, signal.SIGSTOP if kind == "pause" else signal.SIGKILL)
    held = region.held_down(victim) if kind == "down" else contextlib.nullcontext()
    try:
        with held:
            resumed_at = wait_until(resumed, 120, f"writes to {led}")
    finally:
        if kind == "pause":
            os.kill(pid, signal.SIGCONT)
    return float(resumed_at - at), (moved[0] if moved else None)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _resumed(load: Any, partitions: list[int], since: float) -> float | None:
    """When the last of ``partitions`` acknowledged a record sent after ``since``."""
    times = [load.first_ack_after(p, since) for p in partitions]
    return None if None in times else max(t for t in times if t is not None)


# -- report ---------------------------------------------------------------------------------
def machine() -> list[str]:
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return [
        f"  date:         {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
        f"  nproc:        {os.cpu_count()}",
        f"  load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())} (at the end)",
        f"  python:       {platform.python_implementation()} {platform.python_version()}",
        f"  commit:       {commit}",
    ]


def report(cases: list[Case], faults: list[Failover], args: argparse.Namespace) -> None:
    print("Meridian replication benchmark")
    print("\n".join(machine()))
    print(f"  controller:   session timeout {args.session_timeout_s or 'default (6 s)'}")
    report_throughput(cases, args)
    report_latency(cases, args)
    report_failover(faults, args)
    base = args.records / statistics.median(cases[0].seconds)
    ratio = (args.records / statistics.median(cases[2].seconds)) / base
    print("\nAims (reported, never enforced)")
    print(f"  RF=3 acks=all >= {AIM_RATIO:.0%} of RF=1 throughput: {ratio:.0%} "
          f"{'PASS' if ratio >= AIM_RATIO else 'MISS'}")  # fmt: skip
    downs = sorted(f.seconds for f in faults if f.kind == "down")
    if downs:
        verdict = "PASS" if downs[-1] < AIM_FAILOVER_S else "MISS"
        print(f"  failover to a new leader (leader SIGKILLed, kept down) < "
              f"{AIM_FAILOVER_S:.0f} s: max {downs[-1]:.2f} s {verdict}")  # fmt: skip


def report_throughput(cases: list[Case], args: argparse.Namespace) -> None:
    print(f"\n1. Produce throughput, SDK Producer, {args.value_bytes} B values, "
          f"{args.records:,} records per run, {PARTITIONS} partitions, "
          f"median of {args.rounds}")  # fmt: skip
    header = f"{'case':<15} {'records/s':>10} {'MB/s':>6} {'vs RF=1':>8} {'runs (s)':>20}"
    print(f"{header} {'brokers CPU-s':>13} {'client CPU-s':>12} {'others CPU-s':>12}")
    base = args.records / statistics.median(cases[0].seconds)
    for case in cases:
        rate = args.records / statistics.median(case.seconds)
        runs = ", ".join(f"{s:.2f}" for s in case.seconds)
        cpu = [statistics.median(getattr(c, f) for c in case.cpu)
               for f in ("brokers_s", "client_s", "others_s")]  # fmt: skip
        print(f"{case.name:<15} {rate:>10,.0f} {rate * args.value_bytes / 1e6:>6.1f} "
              f"{rate / base:>8.0%} {runs:>20} {cpu[0]:>13.2f} {cpu[1]:>12.2f} "
              f"{cpu[2]:>12.2f}")  # fmt: skip
    print("  CPU-s: CPU-seconds per run (median) of the three broker processes, of this")
    print("  process (the producer), and of everything else on the machine meanwhile.")


def report_latency(cases: list[Case], args: argparse.Namespace) -> None:
    print(f"\n2. Latency, paced at {args.rate:,.0f} records/s for {args.latency_s:.0f} s")
    print(f"{'case':<15} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for case in cases:
        lat = case.latencies_ms
        print(f"{case.name:<15} {len(lat):>6} {percentile(lat, 0.5):>8.2f} "
              f"{percentile(lat, 0.99):>8.2f} {max(lat, default=float('nan')):>8.2f}")  # fmt: skip


def report_failover(faults: list[Failover], args: argparse.Namespace) -> None:
    print("\n3. Failover of the RF=3 acks=all topic: leader faulted -> first ack after it "
          f"(producer request_timeout_ms={args.request_timeout_ms:.0f})")  # fmt: skip
    for f in faults:
        after = " ".join(
            f"p{p}->{leader}@e{epoch}" for p, (leader, epoch) in f.leaders_after.items()
        )
        print(f"  {f.kind:<5} broker {f.broker} (led {f.led}): {f.seconds:5.2f} s "
              f"(elected at {_seconds(f.moved_s)})   "
              f"then {after}{'' if f.moved else ' (same leader)'}")  # fmt: skip
    for kind in ("down", "kill", "pause"):
        times = sorted(f.seconds for f in faults if f.kind == kind)
        if times:
            moved = sum(1 for f in faults if f.kind == kind and f.moved)
            print(f"  {kind}: n={len(times)} p50 {percentile(times, 0.5):.2f} s, "
                  f"max {times[-1]:.2f} s; leadership moved in {moved}")  # fmt: skip
            late = sorted(f.seconds - f.moved_s for f in faults
                          if f.kind == kind and f.moved_s is not None)  # fmt: skip
            if late:
                print(f"    stall after the election: p50 {percentile(late, 0.5):.2f} s, "
                      f"max {late[-1]:.2f} s")  # fmt: skip
    print("  down: SIGKILL, kept from restarting until writes resumed; kill: SIGKILL, the")
    print("  provisioner restarts it at once; pause: SIGSTOP until writes resumed, SIGCONT.")
    print("  pN->B@eE: partition N led by broker B at leader epoch E once writes resumed.")
    print("  elected at: when the controller's database named other leaders for all of them")
    print("  (polled every ~50 ms; -: writes resumed first, or the leadership did not move).")


def main() -> int:
    args = parse_args()
    fresh_database()
    setup_django()
    value = os.urandom(args.value_bytes)
    with tempfile.TemporaryDirectory(prefix="meridian-bench-replication-") as tmp:
        region = None
        try:
            log("starting a controller and three brokers")
            region = start_region(Path(tmp), args)
            cases = make_cases(region)
            for round_number in range(0 if args.failover_only else args.rounds):
                for case in cases:
                    throughput_run(region, case, args.records, value)
                    rate = args.records / case.seconds[-1]
                    log(f"round {round_number + 1} {case.name}: {rate:,.0f}/s")
            for case in [] if args.failover_only else cases:
                latency_run(region.bootstrap, case, args.rate, args.latency_s, value)
                log(f"latency {case.name}: p99 {percentile(case.latencies_ms, 0.99):.1f} ms")
            kinds = ["down"] * args.kills + ["kill"] * args.restarts + ["pause"] * args.pauses
            faults = failovers(region, cases[2], kinds, args.request_timeout_ms)
            if args.failover_only:
                report_failover(faults, args)
            else:
                report(cases, faults, args)
        finally:
            if region is not None:
                region.kill_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
