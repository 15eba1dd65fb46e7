"""Transactions and half messages benchmark: what a transaction costs against the same
records sent idempotently, what read_committed costs against read_uncommitted, and
transactional produce through Meridian's Kafka listener against Apache Kafka, all in the
same run.

Run ``.venv/bin/python bench/messaging_txn.py [--quick] [--only WORKLOADS] [--runs N]``
(or ``./dev bench messaging-txn ...``). It prints its figures and ratios; it is never run
as a test.

The servers, started once for the whole run:

- **Meridian**: one broker process with its Kafka listener (``kafka_protocol``'s
  ``ListenerBroker``: auth off, PLAINTEXT), topics of one partition with
  ``durability=interval`` and one replica, so ``acks=all`` is the leader's append. The
  transaction coordinator runs on the same broker (``__transaction_state``, durability
  always: every decision is fsynced before it is answered).
- **Apache Kafka**: one KRaft node from Maven Central's jars (``kafkapeer.KafkaServer``),
  one replica everywhere (``__transaction_state`` included), Kafka's default of no fsync;
  started only when a ``kafka-*`` workload is selected.

Workloads (``--only``, comma-separated; all by default), 100 B values throughout:

- ``sdk-produce``: the SDK's ``Producer.send`` record by record (``linger_ms=10``,
  ``batch_bytes=1 MiB``, as ``bench/broker.py``'s SDK row), ``acks="all"``: idempotent,
  then transactional with a commit every ``TXN_RECORDS`` (10,000) records, every
  ``SMALL_TXN_RECORDS`` (1,000) and every ``LARGE_TXN_RECORDS`` (100,000); each timed
  until the last record is acknowledged (idempotent: ``flush``) or the last transaction
  committed. A transaction costs a fixed time (its partition added, the commit's flush
  draining the pipeline, EndTxn), so the ratio grows with its size. Aim: transactions
  of 10,000 at least 70% of idempotent's records/s.
- ``sdk-fetch``: a topic loaded (untimed) by the SDK's transactional producer in
  transactions of ``TXN_RECORDS``, every ``ABORT_EVERY``-th aborted (after a ``flush``, so
  its records are in the log); then an SDK ``Consumer`` (``max_poll_records=10,000``,
  ``max_partition_fetch_bytes=4 MiB``) reads it from the start with
  ``isolation_level="read_uncommitted"`` (every record, aborted ones too) and with
  ``"read_committed"`` (the committed ones), after one untimed read, in an order that
  alternates between runs.
  Both cover the same offsets; the figure is log offsets per second. Aim:
  read_committed at least 80% of read_uncommitted's.
- ``kafka-produce``: confluent-kafka (``kafkapeer``'s producer settings: ``linger.ms=10``,
  ``batch.size=1 MiB``) against each server: idempotent (``acks=all``), then with a
  ``transactional.id`` and a commit every ``TXN_RECORDS``. Aim: transactional records/s
  at least 50% of Kafka's (``bench/kafka_protocol.py``'s aim for produce).
- ``kafka-fetch``: a topic loaded on each server as ``sdk-fetch``'s, by confluent-kafka's
  transactional producer; then confluent-kafka's ``consume(10,000)`` reads it as
  ``sdk-fetch`` does, with ``isolation.level`` ``read_uncommitted`` and
  ``read_committed``. Aim: read_committed at
  least 50% of Kafka's offsets/s.
- ``half``: the SDK's half messages one at a time: ``send_half`` then ``commit`` (each
  returns once stored: the record, then its commit marker), against the same producer's
  ``send(...).result()`` one at a time (``linger_ms=0``, acks=all); messages/s and the
  latency of each. No peer: Kafka has no half messages, and RocketMQ is not one of this
  repository's benchmark peers.

Every server moves ``records // 5`` untimed records first (produce and read back, and
one committed transaction), so the JIT compiler of Kafka and the caches of both are warm.
``--runs N`` repeats the workloads N times, alternating which server goes first, and
prints each run and the medians. Aims are reported as PASS/MISS, never enforced.

Every process and temporary directory is removed at the end, also after an error, Ctrl-C
or SIGTERM (``benchkit.Cleanup``). Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import broker
import kafka_protocol
from benchkit import (
    Cleanup,
    Throughput,
    cpu_seconds,
    ms,
    note,
    num,
    percentile,
    print_table,
    progress,
    ratio,
    stopwatch,
    verdict,
)
from brokerload import MERIDIAN, SDK_BATCH_BYTES, SDK_LINGER_MS, sdk_consume, sdk_produce
from confluent_kafka import Producer
from kafkapeer import (
    KAFKA,
    PRODUCE_CHUNK,
    PRODUCER_THROUGHPUT,
    KafkaError,
    _produce,
    kafka_consume,
    kafka_produce,
)

from dataplane import client
from dataplane.client.halves import HalfOutcome

T = TypeVar("T", bound=Throughput)
WORKLOADS = ("sdk-produce", "sdk-fetch", "kafka-produce", "kafka-fetch", "half")
VALUE_BYTES = 100
TXN_RECORDS = 10_000  # records per transaction
SMALL_TXN_RECORDS = 1_000
LARGE_TXN_RECORDS = 100_000
ABORT_EVERY = 10  # the fetch topics: every 10th transaction aborted
RPC_TIMEOUT_S = 60.0
TXN_TIMEOUT_MS = 60_000
SETTING = "interval"  # Meridian's topics; Kafka's are its default (no fsync)

IDEMPOTENT = "idempotent"
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
SYNC_SEND = "send().result()"
HALF = "send_half + commit"


def txn_mode(per_txn: int) -> str:
    return f"transactions of {per_txn:,}"


@dataclass(frozen=True)
class Sizes:
    sdk_records: int  # per SDK produce case and the SDK fetch topic
    kafka_records: int  # per confluent-kafka produce case and its fetch topic
    half_messages: int  # per half-message case (and its baseline)
    max_case_s: float  # a case stops sending after this: a slow server moves fewer


FULL = Sizes(sdk_records=500_000, kafka_records=1_000_000, half_messages=2_000, max_case_s=60.0)
QUICK = Sizes(sdk_records=50_000, kafka_records=100_000, half_messages=200, max_case_s=20.0)


# -- the servers --------------------------------------------------------------------------
@dataclass
class Server:
    """One server as the workloads see it: ``target`` for Kafka clients, ``grpc`` (the
    SDK's bootstrap) on Meridian only."""

    target: kafka_protocol.Target
    grpc: str = ""

    @property
    def system(self) -> str:
        return self.target.system

    def topic(self, name: str) -> str:
        return self.target.create_topic(name, 1)


def start_meridian(cleanup: Cleanup) -> Server:
    progress("Meridian: starting one broker with its Kafka listener")
    node = kafka_protocol.ListenerBroker(cleanup, cleanup.mkdtemp("meridian-"))

    def shutdown() -> None:
        node.close()
        node.stop()

    try:
        target = kafka_protocol.Target(
            MERIDIAN,
            node.local.kafka_address,
            lambda name, partitions: node.create_topic(name, partitions, SETTING),
            shutdown,
            node.local.log_text,
        )
    except BaseException:
        shutdown()
        raise
    return Server(target, node.address)


def start_kafka(cleanup: Cleanup) -> Server:
    return Server(kafka_protocol.start_kafka(cleanup))


def warm_up(server: Server, sizes: Sizes) -> None:
    """Untimed records through the server and the clients, and one transaction."""
    n = max(1, sizes.kafka_records // 5)
    progress(f"{server.system}: warming up with {n:,} x 100 B and a transaction")
    topic = server.topic("bench.txn-warm-up")
    limit_s = sizes.max_case_s * 3
    sent = kafka_produce(server.target.bootstrap, topic, VALUE_BYTES, n, limit_s, "all")
    kafka_txn_produce(server.target.bootstrap, topic, "bench.warm-up", min(n, TXN_RECORDS), 0)
    read_kafka(server.target.bootstrap, topic, READ_COMMITTED, sent + min(n, TXN_RECORDS))
    if server.grpc:
        sdk_txn_produce(server.grpc, topic, "bench.sdk-warm-up", min(n, TXN_RECORDS), TXN_RECORDS)
        read_sdk(server.grpc, topic, READ_COMMITTED, sent + 2 * min(n, TXN_RECORDS), limit_s)


# -- the SDK ------------------------------------------------------------------------------
def sdk_txn_produce(
    bootstrap: str,
    topic: str,
    transactional_id: str,
    records: int,
    per_txn: int,
    *,
    abort_every: int = 0,
    max_s: float = math.inf,
) -> tuple[int, int]:
    """``send`` ``records`` values in transactions of ``per_txn``, every
    ``abort_every``-th aborted once its records are stored (0: none); returns (records
    written, records committed)."""
    value = b"x" * VALUE_BYTES
    producer = client.Producer(
        bootstrap,
        linger_ms=SDK_LINGER_MS,
        batch_bytes=SDK_BATCH_BYTES,
        transactional_id=transactional_id,
        transaction_timeout_ms=TXN_TIMEOUT_MS,
    )
    sent = committed = 0
    deadline = time.perf_counter() + max_s
    try:
        producer.init_transactions()
        n = 0
        while sent < records and time.perf_counter() < deadline:
            n += 1
            chunk = min(per_txn, records - sent)
            producer.begin_transaction()
            for _ in range(chunk):
                producer.send(topic, value)
            sent += chunk
            if abort_every and n % abort_every == 0:
                producer.flush()
                producer.abort_transaction()
            else:
                producer.commit_transaction()
                committed += chunk
    finally:
        producer.close()
    return sent, committed


def read_sdk(bootstrap: str, topic: str, isolation: str, records: int, max_s: float) -> int:
    """``brokerload.sdk_consume`` at ``isolation``."""
    return sdk_consume(bootstrap, topic, records, max_s, isolation_level=isolation)


# -- confluent-kafka ----------------------------------------------------------------------
def kafka_txn_produce(
    bootstrap: str,
    topic: str,
    transactional_id: str,
    records: int,
    abort_every: int,
    per_txn: int = TXN_RECORDS,
    max_s: float = math.inf,
) -> int:
    """``produce()`` ``records`` values in transactions of ``per_txn``, every
    ``abort_every``-th aborted after a ``flush()`` (0: none); returns the records
    written."""
    failed: list[Any] = []

    def on_failure(err: Any, _msg: Any) -> None:
        failed.append(err)

    config = {"bootstrap.servers": bootstrap, **PRODUCER_THROUGHPUT}
    config |= {"transactional.id": transactional_id, "delivery.report.only.error": True}
    config |= {"transaction.timeout.ms": TXN_TIMEOUT_MS}
    producer = Producer({**config, "on_delivery": on_failure})
    producer.init_transactions(RPC_TIMEOUT_S)
    value = b"x" * VALUE_BYTES
    sent = n = 0
    deadline = time.perf_counter() + max_s
    while sent < records and time.perf_counter() < deadline:
        n += 1
        chunk = min(per_txn, records - sent)
        producer.begin_transaction()
        for i in range(chunk):
            _produce(producer, topic, value)
            if i % PRODUCE_CHUNK == PRODUCE_CHUNK - 1:
                producer.poll(0)
        sent += chunk
        if abort_every and n % abort_every == 0:
            producer.flush(RPC_TIMEOUT_S)
            producer.abort_transaction(RPC_TIMEOUT_S)
        else:
            producer.commit_transaction(RPC_TIMEOUT_S)
    if failed:
        raise KafkaError(f"{len(failed)} failed; first: {failed[0]}")
    return sent


def read_kafka(
    bootstrap: str, topic: str, isolation: str, records: int, max_s: float = RPC_TIMEOUT_S
) -> int:
    """``kafkapeer.kafka_consume`` at ``isolation``."""
    return kafka_consume(bootstrap, topic, records, max_s, {"isolation.level": isolation})


# -- results ------------------------------------------------------------------------------
@dataclass
class Scan(Throughput):
    """A catch-up read: ``records`` delivered while covering ``offsets`` of the log."""

    offsets: int = 0

    @property
    def offsets_s(self) -> float:
        return self.offsets / self.seconds if self.seconds else 0.0


@dataclass
class Sequential:
    """One-at-a-time calls: each one's latency (ns)."""

    system: str
    mode: str
    samples_ns: list[int] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def per_s(self) -> float:
        return len(self.samples_ns) / self.seconds if self.seconds else 0.0

    def percentile_ms(self, p: float) -> float:
        ordered = sorted(self.samples_ns)
        return percentile(ordered, p) / 1e6 if ordered else math.nan


@dataclass
class Report:
    produces: list[Throughput] = field(default_factory=list)
    scans: list[Scan] = field(default_factory=list)
    sequential: list[Sequential] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def produce(self, system: str, client_name: str, mode: str) -> float:
        found = _find(self.produces, (system, client_name, mode))
        return math.nan if found is None or not found.records else found.records_s

    def scan(self, system: str, client_name: str, isolation: str) -> float:
        found = _find(self.scans, (system, client_name, isolation))
        return math.nan if found is None or not found.offsets else found.offsets_s


def _find(results: Sequence[T], key: tuple[str, str, str]) -> T | None:
    """The result of (system, client, how) ``key``."""
    return next((r for r in results if (r.system, r.workload, r.mode) == key), None)


def attempt(report: Report, what: str, work: Callable[[], None]) -> None:
    """``broker.attempt`` into this report's errors."""
    errors = broker.Report()
    broker.attempt(errors, what, work)
    report.errors += errors.errors


# -- the workloads ------------------------------------------------------------------------
SDK = "SDK"
LIBRDKAFKA = "confluent-kafka"


def run_sdk_produce(server: Server, sizes: Sizes, report: Report, run: int) -> None:
    n = sizes.sdk_records
    cases: list[tuple[str, str, Callable[[str], int]]] = [
        (
            "idempotent",
            IDEMPOTENT,
            lambda topic: sdk_produce(server.grpc, topic, VALUE_BYTES, n, sizes.max_case_s, "all"),
        )
    ]
    for per_txn in (TXN_RECORDS, SMALL_TXN_RECORDS, LARGE_TXN_RECORDS):

        def transactional(topic: str, per_txn: int = per_txn) -> int:
            tid = f"bench.sdk-{per_txn}-{run}"
            return sdk_txn_produce(server.grpc, topic, tid, n, per_txn, max_s=sizes.max_case_s)[0]

        cases.append((f"txn-{per_txn}", txn_mode(per_txn), transactional))
    _produce_cases(server, report, SDK, f"SDK send() {n:,} x 100 B", cases, run)


def run_kafka_produce(server: Server, sizes: Sizes, report: Report, run: int) -> None:
    n, bootstrap, limit = sizes.kafka_records, server.target.bootstrap, sizes.max_case_s
    cases: list[tuple[str, str, Callable[[str], int]]] = [
        (
            "idempotent",
            IDEMPOTENT,
            lambda topic: kafka_produce(bootstrap, topic, VALUE_BYTES, n, limit, "all"),
        ),
        (
            f"txn-{TXN_RECORDS}",
            txn_mode(TXN_RECORDS),
            lambda topic: kafka_txn_produce(bootstrap, topic, f"bench.ck-{run}", n, 0, max_s=limit),
        ),
    ]
    _produce_cases(
        server, report, LIBRDKAFKA, f"confluent-kafka produce() {n:,} x 100 B", cases, run
    )


def _produce_cases(
    server: Server,
    report: Report,
    client_name: str,
    what: str,
    cases: Sequence[tuple[str, str, Callable[[str], int]]],
    run: int,
) -> None:
    """Each of ``cases`` (topic slug, mode, produce into a topic returning the records
    written) timed on a topic of its own."""
    for slug, mode, produce in cases:
        topic = server.topic(f"bench.{client_name.lower()}-produce-{slug}-{run}")
        progress(f"{server.system}: {what}, {mode}")
        result = Throughput(server.system, client_name, mode, VALUE_BYTES, SETTING)
        with stopwatch(result):
            result.records = produce(topic)
        report.produces.append(result)


def _fetch_cases(
    server: Server,
    report: Report,
    client_name: str,
    topic: str,
    loaded: tuple[int, int],
    read: Callable[[str, int], int],
    run: int,
) -> None:
    """Reads the loaded topic once untimed (the first read of a topic finds colder
    caches), then at both isolation levels, read_uncommitted first in even runs,
    read_committed first in odd ones; ``loaded`` is (records written, records
    committed)."""
    offsets = loaded[0] + _markers(loaded[0])
    progress(f"{server.system}: {client_name} catch-up, untimed, to warm the caches")
    read(READ_UNCOMMITTED, loaded[0])
    cases = [(READ_UNCOMMITTED, loaded[0]), (READ_COMMITTED, loaded[1])]
    for isolation, expected in cases if run % 2 == 0 else reversed(cases):
        progress(f"{server.system}: {client_name} catch-up, {isolation}, {expected:,} records")
        result = Scan(server.system, client_name, isolation, VALUE_BYTES, SETTING)
        with stopwatch(result):
            result.records = read(isolation, expected)
        result.offsets = offsets if result.records >= expected else 0
        if result.records < expected:
            result.note = f"read {result.records:,} of {expected:,}"
        report.scans.append(result)


def _markers(records: int) -> int:
    return math.ceil(records / TXN_RECORDS)


def _committed(records: int) -> int:
    txns = math.ceil(records / TXN_RECORDS)
    aborted = txns // ABORT_EVERY
    return records - aborted * TXN_RECORDS


def run_sdk_fetch(server: Server, sizes: Sizes, report: Report, run: int) -> None:
    n = sizes.sdk_records
    topic = server.topic(f"bench.sdk-fetch-{run}")
    progress(f"{server.system}: loading {n:,} x 100 B in transactions, every 10th aborted")
    tid = f"bench.sdk-load-{run}"
    loaded = sdk_txn_produce(server.grpc, topic, tid, n, TXN_RECORDS, abort_every=ABORT_EVERY)

    def read(isolation: str, expected: int) -> int:
        return read_sdk(server.grpc, topic, isolation, expected, sizes.max_case_s)

    _fetch_cases(server, report, SDK, topic, loaded, read, run)


def run_kafka_fetch(server: Server, sizes: Sizes, report: Report, run: int) -> None:
    n, bootstrap = sizes.kafka_records, server.target.bootstrap
    topic = server.topic(f"bench.ck-fetch-{run}")
    progress(f"{server.system}: loading {n:,} x 100 B in transactions, every 10th aborted")
    sent = kafka_txn_produce(bootstrap, topic, f"bench.ck-load-{run}", n, ABORT_EVERY)
    loaded = (sent, _committed(sent))

    def read(isolation: str, expected: int) -> int:
        return read_kafka(bootstrap, topic, isolation, expected, sizes.max_case_s)

    _fetch_cases(server, report, LIBRDKAFKA, topic, loaded, read, run)


def run_half(server: Server, sizes: Sizes, report: Report, run: int) -> None:
    n = sizes.half_messages
    topic = server.topic(f"bench.half-{run}")
    value = b"x" * VALUE_BYTES
    producer = client.Producer(
        server.grpc,
        acks="all",
        linger_ms=0,
        producer_group=f"bench.halves-{run}",
        check_back=lambda _message: HalfOutcome.COMMIT,
    )

    def half() -> None:
        producer.send_half(topic, value).commit()

    def sync_send() -> None:
        producer.send(topic, value).result(timeout=RPC_TIMEOUT_S)

    try:
        for mode, call in ((SYNC_SEND, sync_send), (HALF, half)):
            progress(f"{server.system}: {n:,} x {mode}, one at a time")
            result = Sequential(server.system, mode)
            deadline = time.perf_counter() + sizes.max_case_s
            started = time.perf_counter()
            while len(result.samples_ns) < n and time.perf_counter() < deadline:
                t0 = time.perf_counter_ns()
                call()
                result.samples_ns.append(time.perf_counter_ns() - t0)
            result.seconds = time.perf_counter() - started
            report.sequential.append(result)
    finally:
        producer.close()


@dataclass(frozen=True)
class Workload:
    run: Callable[[Server, Sizes, Report, int], None]
    systems: tuple[str, ...]


CASES = {
    "sdk-produce": Workload(run_sdk_produce, (MERIDIAN,)),
    "sdk-fetch": Workload(run_sdk_fetch, (MERIDIAN,)),
    "kafka-produce": Workload(run_kafka_produce, (MERIDIAN, KAFKA)),
    "kafka-fetch": Workload(run_kafka_fetch, (MERIDIAN, KAFKA)),
    "half": Workload(run_half, (MERIDIAN,)),
}


def run_once(servers: Sequence[Server], sizes: Sizes, workloads: Sequence[str], run: int) -> Report:
    """One pass of every workload, each on every server it concerns in turn; odd runs
    start with the other server."""
    report = Report()
    order = list(servers) if run % 2 == 0 else list(reversed(servers))
    for workload in workloads:
        for server in order:
            if server.system not in CASES[workload].systems:
                continue
            failures = len(report.errors)
            attempt(
                report,
                f"{server.system} {workload} (run {run + 1})",
                lambda s=server, w=workload: CASES[w].run(s, sizes, report, run),
            )
            if len(report.errors) > failures:
                progress(f"{server.system}: its log ends with\n{server.target.log_tail()}")
    return report


# -- figures ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    label: str
    value: Callable[[Report], float]
    aim: Callable[[float], bool] | None = None
    aim_label: str = ""


def _ratio(
    top: Callable[[Report], float], bottom: Callable[[Report], float]
) -> Callable[..., float]:
    def value(report: Report) -> float:
        a, b = top(report), bottom(report)
        return math.nan if not a or not b or math.isnan(a) or math.isnan(b) else a / b

    return value


def _produced(system: str, client_name: str, mode: str) -> Callable[[Report], float]:
    return lambda report: report.produce(system, client_name, mode)


def _scanned(system: str, client_name: str, isolation: str) -> Callable[[Report], float]:
    return lambda report: report.scan(system, client_name, isolation)


BIG = txn_mode(TXN_RECORDS)
SMALL = txn_mode(SMALL_TXN_RECORDS)
LARGE = txn_mode(LARGE_TXN_RECORDS)
FIGURES = (
    Figure(
        f"SDK: transactions of {TXN_RECORDS:,} / idempotent",
        _ratio(_produced(MERIDIAN, SDK, BIG), _produced(MERIDIAN, SDK, IDEMPOTENT)),
        lambda r: r >= 0.7,
        "transactional produce >= 70% of idempotent",
    ),
    Figure(
        f"SDK: transactions of {SMALL_TXN_RECORDS:,} / idempotent",
        _ratio(_produced(MERIDIAN, SDK, SMALL), _produced(MERIDIAN, SDK, IDEMPOTENT)),
    ),
    Figure(
        f"SDK: transactions of {LARGE_TXN_RECORDS:,} / idempotent",
        _ratio(_produced(MERIDIAN, SDK, LARGE), _produced(MERIDIAN, SDK, IDEMPOTENT)),
    ),
    Figure(
        "SDK: read_committed / read_uncommitted",
        _ratio(_scanned(MERIDIAN, SDK, READ_COMMITTED), _scanned(MERIDIAN, SDK, READ_UNCOMMITTED)),
        lambda r: r >= 0.8,
        "read_committed catch-up >= 80% of read_uncommitted",
    ),
    Figure(
        "confluent-kafka on Meridian: transactional / idempotent",
        _ratio(_produced(MERIDIAN, LIBRDKAFKA, BIG), _produced(MERIDIAN, LIBRDKAFKA, IDEMPOTENT)),
    ),
    Figure(
        "confluent-kafka on Kafka: transactional / idempotent",
        _ratio(_produced(KAFKA, LIBRDKAFKA, BIG), _produced(KAFKA, LIBRDKAFKA, IDEMPOTENT)),
    ),
    Figure(
        "transactional produce: Meridian / Kafka",
        _ratio(_produced(MERIDIAN, LIBRDKAFKA, BIG), _produced(KAFKA, LIBRDKAFKA, BIG)),
        lambda r: r >= 0.5,
        "transactional produce >= 50% of Kafka's",
    ),
    Figure(
        "confluent-kafka on Meridian: read_committed / read_uncommitted",
        _ratio(
            _scanned(MERIDIAN, LIBRDKAFKA, READ_COMMITTED),
            _scanned(MERIDIAN, LIBRDKAFKA, READ_UNCOMMITTED),
        ),
    ),
    Figure(
        "confluent-kafka on Kafka: read_committed / read_uncommitted",
        _ratio(
            _scanned(KAFKA, LIBRDKAFKA, READ_COMMITTED),
            _scanned(KAFKA, LIBRDKAFKA, READ_UNCOMMITTED),
        ),
    ),
    Figure(
        "read_committed catch-up: Meridian / Kafka",
        _ratio(
            _scanned(MERIDIAN, LIBRDKAFKA, READ_COMMITTED),
            _scanned(KAFKA, LIBRDKAFKA, READ_COMMITTED),
        ),
        lambda r: r >= 0.5,
        "read_committed catch-up >= 50% of Kafka's",
    ),
)


def median(values: Sequence[float]) -> float:
    measured = [v for v in values if not math.isnan(v)]
    return statistics.median(measured) if measured else math.nan


# -- output -------------------------------------------------------------------------------
def print_run(report: Report, title: str) -> None:
    headers = ["system", "client", "how", "records", "s", "records/s", "MB/s", "others"]
    rows = [
        [
            t.system,
            t.workload,
            t.mode,
            num(t.records),
            f"{t.seconds:.2f}",
            num(t.records_s),
            num(t.mb_s, 1),
            num(t.other_cpus, 2),
        ]
        for t in report.produces
    ]
    print_table(f"{title}: produce, 100 B, acks=all", headers, rows)
    headers = ["system", "client", "isolation", "records", "offsets", "s", "offsets/s"]
    rows = [
        [
            s.system,
            s.workload,
            s.mode,
            num(s.records),
            num(s.offsets),
            f"{s.seconds:.2f}",
            num(s.offsets_s),
            num(s.other_cpus, 2),
        ]
        for s in report.scans
    ]
    print_table(f"{title}: catch-up from the start", [*headers, "others"], rows)
    for s in report.scans:
        if s.note:
            note(f"{s.system}, {s.workload} {s.mode}: {s.note}")
    headers = ["system", "calls", "count", "s", "calls/s", "p50 ms", "p99 ms", "max ms"]
    rows = [
        [x.system, x.mode, num(len(x.samples_ns)), f"{x.seconds:.2f}", num(x.per_s)]
        + [ms(x.percentile_ms(p)) for p in (0.50, 0.99, 1.0)]
        for x in report.sequential
    ]
    print_table(f"{title}: one at a time (SDK, acks=all)", headers, rows)
    rows = [[f.label, ratio(f.value(report), 1.0)] for f in FIGURES]
    print_table(f"{title}: ratios", ["figure", "ratio"], [r for r in rows if r[1] != "-"])


def print_summary(reports: Sequence[Report]) -> None:
    rows = []
    for f in FIGURES:
        values = [f.value(r) for r in reports]
        if all(math.isnan(v) for v in values):
            continue
        each = ", ".join(ratio(v, 1.0) for v in values)
        rows.append([f.label, ratio(median(values), 1.0), each])
    print_table(f"Medians of {len(reports)} runs", ["figure", "median", "each run"], rows)


def print_aims(reports: Sequence[Report]) -> None:
    rows = []
    for f in FIGURES:
        if f.aim is None:
            continue
        r = median([f.value(report) for report in reports])
        measured = ratio(r, 1.0) + (" (median)" if len(reports) > 1 else "")
        rows.append([f.aim_label, measured, verdict(None if math.isnan(r) else f.aim(r))])
    print_table("Aims (reported, never enforced)", ["aim", "measured", "verdict"], rows)


# -- running ------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"some of {','.join(WORKLOADS)}"
    )
    parser.add_argument("--runs", type=int, default=1, help="repeat everything N times")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(argv)
    chosen = {w.strip() for w in args.only.split(",") if w.strip()}
    if not chosen or chosen - set(WORKLOADS):
        parser.error(f"--only takes some of {', '.join(WORKLOADS)}")
    args.workloads = [w for w in WORKLOADS if w in chosen]
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def machine_rows(root: Path) -> list[tuple[str, str]]:
    rows = [r for r in broker.machine_rows(root) if r[0] not in ("redis-server", "nats-server")]
    rows.append(("meridian", "one broker and its Kafka listener (PLAINTEXT), one replica"))
    rows.append(("topics", "1 partition each, on both; 100 B values"))
    rows.append(("fsync", f"Meridian {broker.MERIDIAN_SETTINGS[SETTING]}; Kafka: none"))
    return rows


def start_servers(
    cleanup: Cleanup, args: argparse.Namespace, sizes: Sizes, setup: Report
) -> list[Server]:
    wanted = {system for w in args.workloads for system in CASES[w].systems}
    servers: list[Server] = []
    for system, start in ((MERIDIAN, start_meridian), (KAFKA, start_kafka)):
        if system not in wanted:
            continue

        def begin(start: Callable[[Cleanup], Server] = start) -> None:
            server = start(cleanup)
            try:
                warm_up(server, sizes)
            except BaseException:
                progress(f"{server.system}: its log ends with\n{server.target.log_tail()}")
                server.target.close()
                raise
            servers.append(server)

        attempt(setup, f"{system} start", begin)
    return servers


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="meridian-bench-txn-", dir=args.dir))
    started = time.perf_counter()
    busy_at_start, ours_at_start = cpu_seconds()
    print(f"Meridian transactions benchmark ({'quick' if args.quick else 'full'} run)")
    for key, value in machine_rows(root):
        print(f"  {key + ':':<20}{value}")
    reports: list[Report] = []
    setup = Report()
    try:
        with Cleanup(root) as cleanup:
            servers = start_servers(cleanup, args, sizes, setup)
            try:
                for run in range(args.runs if servers else 0):
                    report = run_once(servers, sizes, args.workloads, run)
                    reports.append(report)
                    print_run(
                        report, f"Run {run + 1} of {args.runs}" if args.runs > 1 else "Results"
                    )
            finally:
                for server in servers:
                    server.target.close()
    except KeyboardInterrupt:
        print("\ninterrupted: every process and temporary directory was removed", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if len(reports) > 1:
        print_summary(reports)
    if reports:
        print_aims(reports)
    errors = [e for r in [setup, *reports] for e in r.errors]
    for line in errors:
        print(f"\nFAILED: {line}")
    elapsed = time.perf_counter() - started
    busy, ours = cpu_seconds()
    others = max(0.0, (busy - busy_at_start) - (ours - ours_at_start)) / elapsed
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\ntotal wall time {elapsed:.0f} s; load average at the end: {load};")
    print(f"  CPU used by processes outside this benchmark: {others:.2f} of {os.cpu_count()} CPUs")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
