"""Databus benchmark: what the sidecar agent saves the brokers and costs a write, how fast
one application writes through it, and how it recovers from ``kill -9``.

    .venv/bin/python bench/databus_bench.py            # ~4 min here
    .venv/bin/python bench/databus_bench.py --quick    # smoke run: part 1 at one rate
    ./dev bench databus [--quick]

Three broker processes on 127.0.0.1 (``tests/support/brokers.py``), led by the test
controller of ``tests/support/replication.py`` (no control plane); every topic has three
partitions on all three brokers (RF=3, min ISR 2, durability ``interval``), one led by
each. One agent (``python -m databus --config-file``, ``tests/support/databus.py``) with
four streams, each to its own topic, with the default settings (``linger_ms`` 50, lz4,
acks all, spool ``fsync`` always): ``spool``, ``ingest`` and ``recovery``
(``ack_on_spool``) and ``broker`` (``ack_on_broker``). ``--apps`` application processes
start once and take part in every run; an application keys its records by its number,
values are 200 B.

1. **Many small writers**: every application writes ``--rate`` records/s (200), then
   ``--sustained-rate`` (10, a load the agent keeps up with here), for ``--window-s``
   seconds, one record a write, paced (``benchkit.Pacer``; up to ``WRITERS_PER_APP``
   writes of an application wait for their answers at once, as the request threads of a
   server would); through the agent over its unix socket
   (``databus.Client``), to ``spool`` and to ``broker``; then with an SDK ``Producer``
   each (acks=all, its default linger of 5 ms). After a warm-up of ``WARMUP_S``: the
   brokers' produce requests a second (``meridian_broker_requests_total`` of ``Produce``
   and ``ProduceStream``, summed over the three), the records a second the topic gained,
   and each write's time from call to answer (the SDK: to its delivery callback; and the
   time in ``send()``); the agent's, the brokers' and the applications' CPU. At the end
   the topic must hold every acknowledged record and nothing else but failed writes
   (whose outcome is unknown). Aim: at least 10x fewer broker requests through Databus
   than with a producer each, per record delivered (where the agent falls behind, fewer
   requests a second alone would say nothing).
2. **One application's maximum ingest** to ``ingest``, one writer thread, for
   ``--max-s`` seconds a case: HTTP (one keep-alive connection, a JSON body built once)
   and gRPC (``databus.Client`` over the unix socket), 100 records a write and one.
3. **kill -9 under load**: every application writes ``--sustained-rate`` records/s to
   ``recovery`` as in part 1; after ``--kill-after-s`` the agent is killed and started
   again at once. The time from the kill to the new agent answering ``/healthz``; to
   the topic holding as many records as were acknowledged before the kill (the backlog
   delivered: the spool drains in order); and to the first acknowledged write after the
   kill. A write that fails is not sent again. At the end the topic is read back: every
   acknowledged write must be there, once.

Figures only: nothing here asserts a speed. Progress goes to stderr, the report to stdout.
(Not ``databus.py``: in ``bench/`` that name would shadow the ``databus`` package.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit import (
    MB,
    Cleanup,
    Pacer,
    Throughput,
    num,
    percentile,
    print_table,
    progress,
    stopwatch,
    verdict,
    wait_until,
)

from dataplane.client import Admin, TopicPartition
from tests.dataplane.client.support import read_all
from tests.support.brokers import BrokerProcess, start_cluster, stop_all, wait_for_cluster
from tests.support.databus import AgentProcess
from tests.support.replication import TestController

REPO = Path(__file__).resolve().parents[1]
VALUE_BYTES = 200
PARTITIONS = 3
REPLICAS = [1, 2, 3]
AIM_FEWER_REQUESTS = 10.0
WRITERS_PER_APP = 16
WRITE_BACKOFF_S = 0.05  # a writer whose write failed waits this long before its next
START_LEAD_S = 3.0  # every application is told to start this far ahead
WARMUP_S = 2.0
DRAIN_TIMEOUT_S = 180.0
MAX_BATCH = 100
PRODUCE_RPCS = ("Produce", "ProduceStream")
STREAMS = {"spool": "ack_on_spool", "broker": "ack_on_broker", "ingest": "ack_on_spool",
           "recovery": "ack_on_spool"}  # fmt: skip
_REQUESTS = re.compile(r'^meridian_broker_requests_total\{[^}]*rpc="(\w+)"[^}]*\} (\S+)$', re.M)


@dataclass(frozen=True)
class Plan:
    apps: int
    rates: tuple[int, ...]  # records/s per application, one part 1 run each
    recovery_rate: int  # records/s per application in part 3
    window_s: float  # part 1, per case, warm-up included
    max_s: float  # part 2, per case
    recovery_s: float  # part 3: the load's length
    kill_after_s: float


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Plan]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: part 1 at --sustained-rate only"
    )
    parser.add_argument("--apps", type=int, default=50)
    parser.add_argument("--rate", type=int, default=200, help="records/s per application")
    parser.add_argument(
        "--sustained-rate",
        type=int,
        default=10,
        help="a second part 1 run at a rate the agent keeps up with (also part 3's)",
    )
    parser.add_argument("--window-s", type=float, default=None)
    parser.add_argument("--max-s", type=float, default=None)
    parser.add_argument("--kill-after-s", type=float, default=None)
    args = parser.parse_args(argv)
    window, max_s, recovery, kill = (6.0, 2.0, 12.0, 3.0) if args.quick else (20.0, 8.0, 20.0, 6.0)
    plan = Plan(
        apps=args.apps,
        rates=(args.sustained_rate,) if args.quick else (args.rate, args.sustained_rate),
        recovery_rate=args.sustained_rate,
        window_s=args.window_s or window,
        max_s=args.max_s or max_s,
        recovery_s=recovery,
        kill_after_s=args.kill_after_s or kill,
    )
    return args, plan


# -- the application processes ------------------------------------------------------------
def value_of(app: int, seq: int) -> bytes:
    return f"{app}:{seq}:".encode().ljust(VALUE_BYTES, b"x")


def app_main(index: int, conn: Connection) -> None:
    """One application process: runs each command it is sent, answers with its results."""
    import databus  # noqa: F401 - imported before "ready", as an application would be
    import dataplane.client  # noqa: F401

    runs: dict[str, Callable[[int, dict[str, Any]], dict[str, Any]]] = {
        "databus": paced_databus,
        "sdk": paced_sdk,
        "max": max_ingest,
    }
    conn.send("ready")
    while (command := conn.recv()) is not None:
        kind, spec = command
        try:
            conn.send(runs[kind](index, spec))
        except Exception as exc:  # the parent reports it; the process takes the next command
            conn.send({"error": repr(exc)})


def _sleep_until(at_ns: int) -> None:
    delay = (at_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def paced_databus(index: int, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec["rate"]`` writes a second of one record each through ``databus.Client``."""
    from databus import Client, DatabusError

    count = int(spec["rate"] * spec["duration_s"])
    calls, answers, ok = [0] * count, [0] * count, [False] * count
    errors: dict[str, int] = {}
    key = f"app-{index}".encode()
    client = Client(spec["target"], token=spec["token"], timeout_s=30)

    def write(seq: int) -> None:
        calls[seq] = time.monotonic_ns()
        try:
            client.write(spec["stream"], value_of(index, seq), key=key)
            ok[seq] = True
        except DatabusError as err:
            errors[err.kind] = errors.get(err.kind, 0) + 1
            time.sleep(WRITE_BACKOFF_S)
        answers[seq] = time.monotonic_ns()

    pool = ThreadPoolExecutor(WRITERS_PER_APP)
    _sleep_until(spec["start_ns"])
    pacer = Pacer(spec["rate"], count)
    for batch in pacer.batches():
        for seq, _ in batch:
            pool.submit(write, seq)
    pool.shutdown(wait=True, cancel_futures=True)  # writes never started: the app fell behind
    client.close()
    return {"calls": calls, "answers": answers, "ok": ok, "errors": errors}


def paced_sdk(index: int, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec["rate"]`` records a second through ``Producer.send`` (acks=all, default linger)."""
    from dataplane.client import Producer

    count = int(spec["rate"] * spec["duration_s"])
    calls, answers, ok, send_ns = [0] * count, [0] * count, [False] * count, [0] * count
    key = f"app-{index}".encode()
    producer = Producer(spec["bootstrap"], acks="all")
    producer.partitions_for(spec["topic"])
    _sleep_until(spec["start_ns"])
    for seq, _ in Pacer(spec["rate"], count):

        def delivered(error: Exception | None, _metadata: Any, seq: int = seq) -> None:
            answers[seq] = time.monotonic_ns()
            ok[seq] = error is None

        calls[seq] = time.monotonic_ns()
        producer.send(spec["topic"], value_of(index, seq), key=key, on_delivery=delivered)
        send_ns[seq] = time.monotonic_ns() - calls[seq]
    producer.flush(120)
    producer.close(30)
    return {"calls": calls, "answers": answers, "ok": ok, "send_ns": send_ns}


def max_ingest(index: int, spec: dict[str, Any]) -> dict[str, Any]:
    """As many writes of ``spec["batch"]`` records as one thread gets answered in
    ``spec["duration_s"]``; the request is built once."""
    batch, via = spec["batch"], spec["via"]
    write: Callable[[], None]
    if via == "grpc":
        from databus import Client

        client = Client(spec["target"], token=spec["token"])
        records = [(f"app-{index}".encode(), value_of(index, n)) for n in range(batch)]

        def write() -> None:
            client.write_many(spec["stream"], records)

    else:
        host, port = spec["target"].rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        body = json.dumps(
            {"records": [{"key": f"app-{index}", "value": "x" * VALUE_BYTES}] * batch}
        ).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {spec['token']}"}
        path = f"/v1/streams/{spec['stream']}/records"

        def write() -> None:
            connection.request("POST", path, body, headers)
            answer = connection.getresponse()
            text = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"HTTP {answer.status}: {text[:200]!r}")

    writes = 0
    started = time.perf_counter()
    deadline = started + spec["duration_s"]
    while time.perf_counter() < deadline:
        write()
        writes += 1
    return {"writes": writes, "records": writes * batch, "seconds": time.perf_counter() - started}


class Apps:
    """The application processes, started once; each command goes to the first ``n``."""

    def __init__(self, cleanup: Cleanup, count: int) -> None:
        self.conns: list[Connection] = []
        self.pids: list[int] = []
        for index in range(count):
            parent, child = multiprocessing.get_context("spawn").Pipe()
            process = cleanup.spawn(app_main, index, child)
            assert process.pid is not None
            self.conns.append(parent)
            self.pids.append(process.pid)
        for conn in self.conns:
            if not conn.poll(300) or conn.recv() != "ready":
                raise RuntimeError("an application process did not start")

    def start(self, kind: str, spec: dict[str, Any], n: int | None = None) -> None:
        for conn in self.conns[:n]:
            conn.send((kind, spec))

    def results(self, n: int | None = None) -> list[dict[str, Any]]:
        answers = [conn.recv() for conn in self.conns[:n]]
        errors = [a["error"] for a in answers if "error" in a]
        if errors:
            raise RuntimeError(f"{len(errors)} applications failed: {errors[0]}")
        return answers

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)


# -- the brokers and the agent ------------------------------------------------------------
@dataclass
class Setup:
    brokers: list[BrokerProcess]
    controller: TestController
    agent: AgentProcess
    admin: Admin
    apps: Apps
    topics: dict[str, str] = field(default_factory=dict)  # stream or "sdk" -> topic

    @property
    def bootstrap(self) -> str:
        return self.brokers[0].address

    @property
    def socket_target(self) -> str:
        return f"unix:{self.agent.socket}"

    def produce_requests(self) -> float:
        """Produce and ProduceStream requests the brokers have served, all outcomes."""
        total = 0.0
        for broker in self.brokers:
            with urllib.request.urlopen(broker.metrics_url, timeout=10) as answer:
                text = answer.read().decode()
            total += sum(float(v) for rpc, v in _REQUESTS.findall(text) if rpc in PRODUCE_RPCS)
        return total

    def topic_count(self, topic: str, admin: Admin | None = None) -> int:
        """Records in ``topic`` (the sum of its partitions' ends; every topic starts empty)."""
        specs: dict[TopicPartition, int | str] = {
            TopicPartition(topic, p): "latest" for p in range(PARTITIONS)
        }
        return sum(offset for offset, _ in (admin or self.admin).list_offsets(specs).values())

    def agent_cpu_s(self) -> float:
        assert self.agent.process is not None
        return cpu_s([self.agent.process.pid])

    def broker_cpu_s(self) -> float:
        return cpu_s([b.pid for b in self.brokers if b.pid is not None])

    def wait_drained(self) -> None:
        def drained() -> bool:
            return all(s["spool_records"] == 0 for s in self.agent.health()["streams"].values())

        wait_until(drained, DRAIN_TIMEOUT_S, "the agent's spool to drain")


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user and system) the processes ``pids`` have used so far."""
    total = 0.0
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Adopted:
    """An ``AgentProcess`` as ``Cleanup`` stops things and counts their CPU (whichever
    process the agent runs as, after a restart too)."""

    def __init__(self, agent: AgentProcess) -> None:
        self.agent = agent

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.agent.process

    def stop(self, timeout_s: float = 0.0) -> int:
        self.agent.stop()
        return 0


def create_topic(controller: TestController, topic: str) -> None:
    """Three partitions on every broker, partition p led by broker p + 1."""
    controller.create_topic(
        topic, REPLICAS, partitions=PARTITIONS, min_isr=2, durability="interval"
    )
    for partition in range(1, PARTITIONS):
        controller.elect(topic, partition, leader=REPLICAS[partition])


def start_setup(cleanup: Cleanup, root: Path, plan: Plan) -> Setup:
    progress("starting 3 brokers")
    brokers = start_cluster(root, 3)
    for broker in brokers:
        cleanup.adopt(broker)
    wait_for_cluster(brokers)
    controller = TestController(brokers, interval_s=0.5)
    topics = {name: f"acme.bus-{name}" for name in STREAMS} | {"sdk": "acme.sdk"}
    for topic in topics.values():
        create_topic(controller, topic)
    controller.start()
    config = root / "databus.json"
    streams = {
        name: {"topic": topics[name], "delivery": delivery} for name, delivery in STREAMS.items()
    }
    config.write_text(json.dumps({"streams": streams}))
    progress("starting the agent")
    agent = AgentProcess(root / "agent", brokers[0].address, args=["--config-file", str(config)])
    agent.start()
    cleanup.adopt(Adopted(agent))
    progress(f"starting {plan.apps} application processes")
    apps = Apps(cleanup, plan.apps)
    return Setup(brokers, controller, agent, Admin(brokers[0].address), apps, topics)


# -- 1. many small writers ----------------------------------------------------------------
@dataclass
class Case:
    name: str
    topic: str
    offered_s: float = 0.0
    requests_s: float = 0.0
    delivered_s: float = 0.0
    latencies_ns: list[int] = field(default_factory=list)
    send_ns: list[int] = field(default_factory=list)
    acked: int = 0
    failed: int = 0
    behind: int = 0  # writes never started: the application fell behind its schedule
    in_topic: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # failed writes by kind
    agent_cpus: float = math.nan  # the agent's CPU use in the window, in CPUs
    broker_cpus: float = math.nan  # the three brokers' together
    apps_cpus: float = math.nan  # the application processes' together
    result: Throughput | None = None

    @property
    def intact(self) -> bool:
        """Every acknowledged record in the topic, and nothing but them and failed writes
        (a failed write's outcome is unknown: the agent may have spooled it)."""
        return self.acked <= self.in_topic <= self.acked + self.failed


def many_writers(setup: Setup, plan: Plan, rate: int, name: str, kind: str, stream: str) -> Case:
    topic = setup.topics[stream]
    case = Case(name, topic, offered_s=plan.apps * rate)
    start_ns = time.monotonic_ns() + int(START_LEAD_S * 1e9)
    before = setup.topic_count(topic)
    spec = {"rate": rate, "duration_s": plan.window_s, "start_ns": start_ns,
            "target": setup.socket_target, "token": setup.agent.token, "stream": stream,
            "bootstrap": setup.bootstrap, "topic": topic}  # fmt: skip
    progress(f"part 1: {name}, {plan.apps} apps x {rate}/s for {plan.window_s:.0f} s")
    case.result = Throughput("Databus", "produce", name, VALUE_BYTES, "")
    setup.apps.start(kind, spec)
    _sleep_until(start_ns + int(WARMUP_S * 1e9))
    with stopwatch(case.result):
        requests, count, at = setup.produce_requests(), setup.topic_count(topic), time.monotonic()
        agent, brokers, apps = setup.agent_cpu_s(), setup.broker_cpu_s(), cpu_s(setup.apps.pids)
        _sleep_until(start_ns + int(plan.window_s * 1e9))
        seconds = time.monotonic() - at
        case.requests_s = (setup.produce_requests() - requests) / seconds
        case.delivered_s = (setup.topic_count(topic) - count) / seconds
        case.agent_cpus = (setup.agent_cpu_s() - agent) / seconds
        case.broker_cpus = (setup.broker_cpu_s() - brokers) / seconds
        case.apps_cpus = (cpu_s(setup.apps.pids) - apps) / seconds
    measured_from = start_ns + int(WARMUP_S * 1e9)
    for answer in setup.apps.results():
        add_writes(case, answer, measured_from)
    if kind == "databus":
        setup.wait_drained()
    case.in_topic = setup.topic_count(topic) - before
    return case


def add_writes(case: Case, answer: dict[str, Any], measured_from: int) -> None:
    sends = answer.get("send_ns")
    for kind, n in answer.get("errors", {}).items():
        case.errors[kind] = case.errors.get(kind, 0) + n
    for seq, (call, done, ok) in enumerate(zip(answer["calls"], answer["answers"], answer["ok"],
                                               strict=True)):  # fmt: skip
        if not call:
            case.behind += 1
            continue
        case.acked += ok
        case.failed += not ok
        if ok and call >= measured_from:
            case.latencies_ns.append(done - call)
            if sends is not None:
                case.send_ns.append(sends[seq])


def pct_ms(samples: list[int], p: float) -> float:
    return percentile(sorted(samples), p) / 1e6 if samples else math.nan


def per_k(case: Case) -> float:
    """Produce requests per 1,000 records delivered."""
    return 1000 * case.requests_s / case.delivered_s if case.delivered_s else math.nan


def report_many(plan: Plan, rate: int, cases: list[Case]) -> None:
    sdk = cases[-1]
    rows = []
    for case in cases:
        fewer = per_k(sdk) / per_k(case)
        aim = "" if case is sdk else verdict(fewer >= AIM_FEWER_REQUESTS)
        send = f"{pct_ms(case.send_ns, 0.5):.3f} / {pct_ms(case.send_ns, 0.99):.3f}"
        rows.append([
            case.name, num(case.requests_s), num(per_k(case), 1),
            "" if case is sdk else f"{fewer:.1f}x", aim, num(case.delivered_s),
            f"{pct_ms(case.latencies_ns, 0.5):.2f}",
            f"{pct_ms(case.latencies_ns, 0.99):.2f}", send if case.send_ns else "",
            f"{case.acked:,} / {case.failed:,} / {case.behind:,}",
            f"{case.in_topic:,} {'PASS' if case.intact else 'MISS'}",
            num(case.agent_cpus, 2), num(case.broker_cpus, 2), num(case.apps_cpus, 2),
            num(case.result.other_cpus, 2) if case.result else "-",
        ])  # fmt: skip
    print_table(
        f"1. {plan.apps} applications x {rate} records/s of {VALUE_BYTES} B, one a write "
        f"(offered {plan.apps * rate:,}/s; {plan.window_s - WARMUP_S:.0f} s measured)",
        ["case", "produce req/s", "req/1k rec", "fewer", f"aim >= {AIM_FEWER_REQUESTS:.0f}x",
         "records/s",
         "write p50 ms", "p99 ms", "send() p50/p99 ms", "acked / failed / behind",
         "in topic = acked", "agent CPUs", "broker CPUs", "apps CPUs", "others"],
        rows,
    )  # fmt: skip
    for case in cases:
        if case.errors:
            kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(case.errors.items()))
            print(f"  {case.name}: failed writes by kind: {kinds}")


# -- 2. one application's maximum ingest --------------------------------------------------
def max_ingests(setup: Setup, plan: Plan) -> list[list[str]]:
    rows = []
    topic = setup.topics["ingest"]
    acked = 0
    for via in ("http", "grpc"):
        for batch in (MAX_BATCH, 1):
            progress(f"part 2: {via}, {batch} records a write, {plan.max_s:.0f} s")
            target = setup.agent.http if via == "http" else setup.socket_target
            spec = {"via": via, "batch": batch, "duration_s": plan.max_s, "target": target,
                    "token": setup.agent.token, "stream": "ingest"}  # fmt: skip
            setup.apps.start("max", spec, 1)
            answer = setup.apps.results(1)[0]
            acked += answer["records"]
            rate = answer["records"] / answer["seconds"]
            rows.append([f"{via.upper()}, {batch} a write", num(rate),
                         f"{rate * VALUE_BYTES / MB:.2f}",
                         num(answer["writes"] / answer["seconds"]),
                         f"{answer['seconds'] / answer['writes'] * 1e3:.2f}"])  # fmt: skip
    setup.wait_drained()
    in_topic = setup.topic_count(topic)
    rows.append([f"in the topic after the drain: {in_topic:,} of {acked:,} acknowledged",
                 "", "", "", "PASS" if in_topic == acked else "MISS"])  # fmt: skip
    return rows


# -- 3. kill -9 under load ----------------------------------------------------------------
@dataclass
class Recovery:
    to_health_s: float = math.nan
    to_backlog_s: float = math.nan
    to_first_ack_s: float = math.nan
    backlog: int = 0  # records the restarted agent's spool held
    unsent_at_kill: int = 0  # acknowledged before the kill, not in the topic at the kill
    acked_before: int = 0
    acked: int = 0
    failed: int = 0
    lost: int = 0
    twice: int = 0


class CountPoller:
    """The topic's record count every 50 ms, with the time (ns) it was read."""

    def __init__(self, setup: Setup, topic: str) -> None:
        self.samples: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(setup, topic), daemon=True)
        self._thread.start()

    def _run(self, setup: Setup, topic: str) -> None:
        with Admin(setup.bootstrap) as admin:
            while not self._stop.wait(0.05):
                self.samples.append((time.monotonic_ns(), setup.topic_count(topic, admin)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def recovery(setup: Setup, plan: Plan) -> Recovery:
    topic, result = setup.topics["recovery"], Recovery()
    start_ns = time.monotonic_ns() + int(START_LEAD_S * 1e9)
    spec = {"rate": plan.recovery_rate, "duration_s": plan.recovery_s, "start_ns": start_ns,
            "target": setup.socket_target, "token": setup.agent.token,
            "stream": "recovery"}  # fmt: skip
    load = f"{plan.apps} apps x {plan.recovery_rate}/s"
    progress(f"part 3: {load}; kill -9 after {plan.kill_after_s:.0f} s")
    setup.apps.start("databus", spec)
    poller = CountPoller(setup, topic)
    _sleep_until(start_ns + int(plan.kill_after_s * 1e9))
    killed_ns = time.monotonic_ns()
    setup.agent.kill()
    setup.agent.start()
    result.to_health_s = (time.monotonic_ns() - killed_ns) / 1e9
    result.backlog = setup.agent.health()["streams"]["recovery"]["spool_records"]
    progress(f"part 3: the agent answers /healthz {result.to_health_s:.2f} s after the kill")
    answers = setup.apps.results()
    setup.wait_drained()
    poller.stop()
    first_after = []
    for answer in answers:
        for call, done, ok in zip(answer["calls"], answer["answers"], answer["ok"], strict=True):
            result.acked += ok
            result.failed += bool(call) and not ok
            result.acked_before += ok and done < killed_ns
            if ok and call > killed_ns:
                first_after.append(done)
    if first_after:
        result.to_first_ack_s = (min(first_after) - killed_ns) / 1e9
    reached = [
        at for at, count in poller.samples if at > killed_ns and count >= result.acked_before
    ]
    if reached:
        result.to_backlog_s = (min(reached) - killed_ns) / 1e9
    before = [count for at, count in poller.samples if at <= killed_ns]
    if before:
        result.unsent_at_kill = max(0, result.acked_before - before[-1])
    check_delivered(setup, topic, answers, result)
    return result


def check_delivered(
    setup: Setup, topic: str, answers: list[dict[str, Any]], result: Recovery
) -> None:
    """Counts acknowledged writes missing from ``topic``, and records found more than once."""
    progress("part 3: reading the topic back")
    seen: set[tuple[int, int]] = set()
    for records in read_all(setup.bootstrap, topic, PARTITIONS, timeout_s=300).values():
        for record in records:
            app, seq, _ = record.value.split(b":", 2)
            found = (int(app), int(seq))
            result.twice += found in seen
            seen.add(found)
    for app, answer in enumerate(answers):
        result.lost += sum(ok and (app, seq) not in seen for seq, ok in enumerate(answer["ok"]))


def report_recovery(plan: Plan, r: Recovery) -> None:
    intact = r.lost == 0 and r.twice == 0
    print_table(
        f"3. kill -9 of the agent under load ({plan.apps} apps x {plan.recovery_rate}/s over "
        f"the unix socket, ack_on_spool; killed after {plan.kill_after_s:.0f} s, "
        "started again at once)",
        ["measure", "value"],
        [
            ["kill -> the new agent answers /healthz", f"{r.to_health_s:.2f} s"],
            ["kill -> backlog delivered (topic holds every record acked before the kill)",
             f"{r.to_backlog_s:.2f} s"],
            ["kill -> first acknowledged write after it", f"{r.to_first_ack_s:.2f} s"],
            ["acknowledged, not in the topic at the kill (last count before it)",
             f"{r.unsent_at_kill:,} records"],
            ["spool backlog when the new agent answered", f"{r.backlog:,} records"],
            ["writes acknowledged (before the kill) / failed",
             f"{r.acked:,} ({r.acked_before:,}) / {r.failed:,}"],
            ["acknowledged and lost / delivered twice",
             f"{r.lost:,} / {r.twice:,} {'PASS' if intact else 'MISS'}"],
        ],
    )  # fmt: skip


# -- the run ------------------------------------------------------------------------------
def machine() -> list[str]:
    commit = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                            capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor() or "unknown")  # fmt: skip
    return [
        f"  date:         {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
        f"  cpus:         {len(os.sched_getaffinity(0))} x {cpu}",
        f"  load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())} (at the start)",
        f"  python:       {platform.python_implementation()} {platform.python_version()}",
        f"  commit:       {commit}",
    ]


def run(cleanup: Cleanup, root: Path, plan: Plan) -> bool:
    setup = start_setup(cleanup, root, plan)
    try:
        cases = []
        for rate in plan.rates:
            these = [
                many_writers(setup, plan, rate, "Databus ack_on_spool (gRPC, unix socket)",
                             "databus", "spool"),
                many_writers(setup, plan, rate, "Databus ack_on_broker (gRPC, unix socket)",
                             "databus", "broker"),
                many_writers(setup, plan, rate, "SDK Producer each (acks=all)", "sdk", "sdk"),
            ]  # fmt: skip
            report_many(plan, rate, these)
            note_others()
            cases += these
        rows = max_ingests(setup, plan)
        print_table(
            f"2. One application's maximum ingest ({VALUE_BYTES} B values, one thread, "
            f"{plan.max_s:.0f} s a case, ack_on_spool)",
            ["case", "records/s", "MB/s (values)", "writes/s", "ms a write"],
            rows,
        )
        result = recovery(setup, plan)
        report_recovery(plan, result)
        return all(c.intact for c in cases) and result.lost == 0 and result.twice == 0
    finally:
        setup.apps.close()
        setup.admin.close()
        setup.agent.stop()
        setup.controller.stop()
        stop_all(setup.brokers)


def note_others() -> None:
    print("  fewer: the SDK's produce requests per record over this case's (the aim); others:")
    print("  CPUs used meanwhile by processes outside the benchmark; behind: writes an application")
    print("  never started because all its writers were waiting (none: it kept its schedule)")


def main(argv: Sequence[str] | None = None) -> int:
    args, plan = parse_args(argv)
    print(f"Meridian Databus benchmark ({'quick' if args.quick else 'full'} run)")
    print("\n".join(machine()))
    started = time.perf_counter()
    with Cleanup(Path(tempfile.gettempdir())) as cleanup:
        root = cleanup.mkdtemp("meridian-bench-databus-")
        intact = run(cleanup, root, plan)
    print(f"\ntotal wall time {time.perf_counter() - started:.0f} s")
    return 0 if intact else 1


if __name__ == "__main__":
    sys.exit(main())
