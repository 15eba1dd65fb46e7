"""The Apache Kafka peer of the broker benchmark: one KRaft node, driven by confluent-kafka.

Kafka ``KAFKA_VERSION`` runs from its jars on Maven Central: ``org.apache.kafka:kafka_2.13``
with its runtime dependencies, copied by ``mvn dependency:copy-dependencies`` from a
generated pom into ``KAFKA_HOME/libs`` (``.services/kafka-<version>/`` beside ``./dev``'s
services; ``MERIDIAN_SERVICES_DIR`` moves it, as it moves them). The first run that needs
Kafka fetches them; nothing else does, and nothing of it is committed.

Each run starts one node that is both broker and controller (``process.roles``) on free
ports of 127.0.0.1, with its log directory in the run's temporary directory: the storage
is formatted with ``kafka.tools.StorageTool format`` and the node started with
``kafka.Kafka`` and a generated ``server.properties``, under ``java`` (``JAVA_HOME`` if
set, else the one on PATH; Kafka 4 needs 17 or later) with the heap and G1 options of
Kafka's own ``kafka-server-start.sh``. The process dies with the benchmark (``Cleanup``).

The client is confluent-kafka (librdkafka), what a Python user of Kafka picks, in the
settings such a user sets for throughput:

- **produce**: ``produce()`` per record in one thread, ``linger.ms=10`` and
  ``batch.size=1 MiB`` (as Meridian's SDK row: ``linger_ms=10``, ``batch_bytes=1 MiB``),
  no compression; delivery reports for failures only (``delivery.report.only.error``),
  ``flush()`` at the end; ``acks=all`` (with idempotence, as Meridian's SDK) and
  ``acks=1``. A full local queue (``BufferError``) is served with ``poll`` and retried.
- **catch-up**: ``consume(10,000)`` from the start of one assigned partition
  (``max.partition.fetch.bytes=4 MiB`` as Meridian's SDK consumer, and
  ``fetch.queue.backoff.ms=0``: ``CONSUMER_THROUGHPUT`` says why), each message's
  ``error()`` checked.
- **latency**: ``produce()`` with ``linger.ms=0`` and ``acks=1`` (as Meridian's SDK row),
  ``poll()`` per message on the consumer (long-polling fetches, ``fetch.min.bytes=1``),
  Nagle's algorithm off on both (``socket.nagle.disable``; librdkafka leaves it on), at
  most 5 requests in flight (``LATENCY_PRODUCER`` says why).

Fsync: Kafka's default is none per append (see ``KAFKA_FSYNC``); the second setting is the
topic config ``flush.messages=1``, which fsyncs the log inside every append (one produce
request's batch) before the ack, Meridian's ``durability=always`` at Kafka's granularity.

A node's JIT compiler warms up on its first records, untimed: each server first moves
``Plan.records // 5`` records of 100 B (produce and read back), and before the latency
rows runs one latency case that is not reported.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
from benchkit import (
    VALUE_SIZES,
    Cleanup,
    Latency,
    LatencyCollector,
    MiB,
    Pacer,
    Plan,
    Throughput,
    measure_latency,
    pdeathsig_prefix,
    progress,
    stamped_value,
    stopwatch,
    wait_until,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from dataplane.local import free_ports

KAFKA = "Apache Kafka"
KAFKA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
# Kafka's libs carry no SLF4J 1.7 binding; this one sends its logging to log4j2.
LOG4J_VERSION = "2.25.5"
REPO = Path(__file__).resolve().parents[1]
KAFKA_HOME = (
    Path(os.environ.get("MERIDIAN_SERVICES_DIR", REPO / ".services")) / f"kafka-{KAFKA_VERSION}"
)
READY_TIMEOUT_S = 120.0  # a cold JVM on a busy 2-CPU machine
FETCH_TIMEOUT_S = 900.0
FORMAT_TIMEOUT_S = 120.0
RPC_TIMEOUT_S = 60.0
# kafka-server-start.sh's KAFKA_HEAP_OPTS and kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
JVM_OPTIONS = [
    "-Xmx1G",
    "-Xms1G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]

PRODUCER_THROUGHPUT = {"linger.ms": 10, "batch.size": 1 * MiB, "compression.type": "none"}
CONSUMER_BATCH = 10_000
# librdkafka pauses a partition's fetching for fetch.queue.backoff.ms (1,000 ms) once
# queued.min.messages (100,000) wait in its local queue: a catch-up reader drains that in a
# fraction of it and then waits (~120-160 k records/s of 100 B here; 1.5x that without it).
CONSUMER_THROUGHPUT = {"max.partition.fetch.bytes": 4 * MiB, "fetch.queue.backoff.ms": 0}
PRODUCE_CHUNK = 10_000
# librdkafka leaves Nagle's algorithm on by default; whoever tunes for latency turns it off.
LATENCY_SOCKETS = {"socket.nagle.disable": True}
# With linger.ms=0 and librdkafka's default of 1,000,000 requests in flight, every record
# leaves as a request of its own; a broker serves one connection's requests one at a time,
# and on this machine falls seconds behind at 5,000/s. Five in flight (the Java client's
# default, and idempotence's limit) lets what falls due meanwhile share the next request.
LATENCY_PRODUCER = {"linger.ms": 0, "max.in.flight.requests.per.connection": 5}
ACKS = ("all", "1")
DEFAULT = "default"
FLUSH_EACH = "flush.messages=1"
TOPIC_CONFIGS = {DEFAULT: {}, FLUSH_EACH: {"flush.messages": "1"}}
KAFKA_FSYNC = {
    DEFAULT: "log.flush.* unset (Kafka's default): the ack follows the append to the page "
    "cache; fsync only when a segment rolls or the broker stops (Kafka counts on replicas)",
    FLUSH_EACH: "topic flush.messages=1: the log is fsynced inside every append (one produce "
    "request's batch), before the ack",
}
CONSUME_MODE = f"consume() {CONSUMER_BATCH:,}"
LATENCY_MODE = "produce / poll"
CLIENT_NOTE = (
    f"Kafka: confluent-kafka produce() with linger.ms={PRODUCER_THROUGHPUT['linger.ms']}, "
    f"batch.size={PRODUCER_THROUGHPUT['batch.size']:,}, no compression, delivery reports "
    "for failures only, idempotence with acks=all; consume() of "
    f"{CONSUMER_BATCH:,} with max.partition.fetch.bytes="
    f"{CONSUMER_THROUGHPUT['max.partition.fetch.bytes']:,}, fetch.queue.backoff.ms=0; "
    "latency: linger.ms=0, acks=1, max.in.flight=5, socket.nagle.disable, poll() per "
    "message; JIT warmed up first (untimed)"
)


def produce_mode(acks: str) -> str:
    return f"produce() acks={acks}"


# What broker.py compares: (workload, Meridian mode, Meridian setting, peer, peer mode,
# peer setting), the fsync settings paired by what the ack means on one broker.
COMPARISONS = (
    ("produce", "SDK Producer", "interval", KAFKA, produce_mode("1"), DEFAULT),
    ("produce", "SDK Producer", "interval", KAFKA, produce_mode("all"), DEFAULT),
    ("produce", "SDK Producer", "always", KAFKA, produce_mode("all"), FLUSH_EACH),
    ("produce", "prebuilt batches", "interval", KAFKA, produce_mode("all"), DEFAULT),
    ("produce", "prebuilt batches", "always", KAFKA, produce_mode("all"), FLUSH_EACH),
    ("consume", "SDK Consumer", "interval", KAFKA, CONSUME_MODE, DEFAULT),
    ("consume", "raw Fetch 8 MiB", "interval", KAFKA, CONSUME_MODE, DEFAULT),
)
# (Meridian latency mode, Meridian setting, peer, peer setting)
LATENCY_COMPARISONS = (
    ("SDK send / poll", "interval", KAFKA, DEFAULT),
    ("SDK send / poll", "always", KAFKA, FLUSH_EACH),
    ("raw Produce / Fetch", "interval", KAFKA, DEFAULT),
)


class KafkaError(RuntimeError):
    """Kafka could not be fetched, started, or did not take or deliver records."""


# -- the jars -----------------------------------------------------------------------------
POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>meridian.bench</groupId>
  <artifactId>kafka-peer</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""


def kafka_libs(home: Path = KAFKA_HOME) -> Path:
    """``home/libs`` with Kafka's jars, fetched from Maven Central if not there yet."""
    libs = home / "libs"
    if (libs / ".complete").exists():
        return libs
    home.mkdir(parents=True, exist_ok=True)
    pom = home / "pom.xml"
    pom.write_text(POM.format(scala=SCALA_VERSION, kafka=KAFKA_VERSION, log4j=LOG4J_VERSION))
    partial = home / "libs.partial"
    progress(f"Kafka: fetching kafka_{SCALA_VERSION} {KAFKA_VERSION} from Maven Central")
    command = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies"]
    command += ["-DincludeScope=runtime", f"-DoutputDirectory={partial}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except FileNotFoundError as exc:
        raise KafkaError("mvn is not installed (./dev bench installs it)") from exc
    if done.returncode != 0:
        raise KafkaError(f"mvn could not fetch Kafka:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    # Complete or absent: an interrupted fetch never passes for a whole one.
    (partial / ".complete").touch()
    partial.rename(libs)
    return libs


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else "java"


def java_version() -> str:
    try:
        out = subprocess.run([java_binary(), "-version"], capture_output=True, text=True)
    except FileNotFoundError:
        return "not installed"
    return out.stderr.strip().splitlines()[0] if out.returncode == 0 else "?"


def describe() -> str:
    """The machine-rows line: what runs, and on what."""
    return (
        f"Apache Kafka {KAFKA_VERSION} (Maven Central jars), {java_version()}; "
        f"confluent-kafka {confluent_kafka.__version__} "
        f"(librdkafka {confluent_kafka.libversion()[0]})"
    )


# -- the server ---------------------------------------------------------------------------
def server_properties(data_dir: Path, broker_port: int, controller_port: int) -> str:
    """One KRaft node, broker and controller, on 127.0.0.1; every internal topic with one
    replica; topics created only by the bench."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


# Warnings and errors only, plus the line that says the node is up.
LOG4J2 = """rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
"""
READY_LINE = "Kafka Server started"


def slug(setting: str) -> str:
    """``setting`` as a piece of a topic name (letters, digits, '.', '_' and '-')."""
    return setting.replace("=", "-")


def cluster_id() -> str:
    """A random cluster id in Kafka's form (a UUID as unpadded URL-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class KafkaServer:
    """One KRaft node (``kafka.Kafka``) on free ports of 127.0.0.1, its log dir in a
    temporary directory of ``cleanup``."""

    def __init__(self, cleanup: Cleanup) -> None:
        self.cleanup = cleanup
        self.dir = cleanup.mkdtemp("kafka-")
        self.port, controller_port = free_ports(2)
        config = self.dir / "server.properties"
        config.write_text(server_properties(self.dir / "data", self.port, controller_port))
        (self.dir / "log4j2.properties").write_text(LOG4J2)
        self.log = self.dir / "kafka.log"
        java = [java_binary(), "-cp", f"{kafka_libs()}/*"]
        java += [f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}"]
        self._format(java, config)
        self.process = cleanup.popen(
            [*java, *JVM_OPTIONS, "kafka.Kafka", str(config)], log=self.log
        )
        wait_until(self._ready, READY_TIMEOUT_S, "Kafka start")
        self.admin: AdminClient | None = AdminClient({"bootstrap.servers": self.bootstrap})

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _format(self, java: list[str], config: Path) -> None:
        command = [*pdeathsig_prefix(), *java, "-Xmx256M", "kafka.tools.StorageTool", "format"]
        command += ["-t", cluster_id(), "-c", str(config)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S)
        if done.returncode != 0:
            raise KafkaError(f"kafka-storage format failed:\n{done.stdout[-3000:]}{done.stderr}")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise KafkaError(f"Kafka exited: {self.log.read_text(errors='replace')[-5000:]}")
        return READY_LINE in self.log.read_text(errors="replace")

    def create_topic(self, name: str, setting: str = DEFAULT) -> str:
        """A topic of one partition (one replica) with the fsync ``setting``; returns it
        once its partition has a leader."""
        assert self.admin is not None
        topic = NewTopic(
            name, num_partitions=1, replication_factor=1, config=TOPIC_CONFIGS[setting]
        )
        self.admin.create_topics([topic])[name].result(RPC_TIMEOUT_S)
        wait_until(lambda: self._has_leader(name), RPC_TIMEOUT_S, f"a leader for {name}")
        return name

    def _has_leader(self, name: str) -> bool:
        assert self.admin is not None
        found = self.admin.list_topics(name, timeout=RPC_TIMEOUT_S).topics.get(name)
        return found is not None and found.error is None and found.partitions[0].leader >= 0

    def stop(self) -> None:
        self.admin = None  # librdkafka's handle goes before the server, quietly
        self.cleanup.stop_process(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the client ---------------------------------------------------------------------------
def kafka_produce(
    bootstrap: str, topic: str, value_bytes: int, records: int, max_s: float, acks: str
) -> int:
    """``produce()`` ``records`` values, then ``flush()``; returns the records acked."""
    failed: list[Any] = []

    def on_failure(err: Any, _msg: Any) -> None:
        failed.append(err)

    config = {"bootstrap.servers": bootstrap, "acks": acks, **PRODUCER_THROUGHPUT}
    config |= {"enable.idempotence": acks == "all", "delivery.report.only.error": True}
    producer = Producer({**config, "on_delivery": on_failure})
    value = b"x" * value_bytes
    sent = 0
    deadline = time.perf_counter() + max_s
    while sent < records and time.perf_counter() < deadline:
        chunk = min(PRODUCE_CHUNK, records - sent)
        for _ in range(chunk):
            _produce(producer, topic, value)
        producer.poll(0)
        sent += chunk
    unsent = producer.flush(RPC_TIMEOUT_S)
    if unsent or failed:
        first = failed[0] if failed else "flush timed out"
        raise KafkaError(f"{unsent} undelivered, {len(failed)} failed; first: {first}")
    return sent


def _produce(producer: Producer, topic: str, value: bytes) -> None:
    """One ``produce``; a full local queue is drained a little and the record retried, as
    confluent-kafka's documentation does it."""
    while True:
        try:
            producer.produce(topic, value)
            return
        except BufferError:
            producer.poll(0.001)


def kafka_consume(
    bootstrap: str,
    topic: str,
    records: int,
    max_s: float,
    extra: dict[str, Any] | None = None,
    *,
    partitions: int = 1,
) -> int:
    """``consume()`` from the start of partitions 0 to ``partitions - 1`` (``extra``: more
    consumer settings); returns the records received."""
    consumer = Consumer(_consumer_config(bootstrap, {**CONSUMER_THROUGHPUT, **(extra or {})}))
    got = 0
    try:
        start = confluent_kafka.OFFSET_BEGINNING
        consumer.assign([TopicPartition(topic, p, start) for p in range(partitions)])
        deadline = time.perf_counter() + max_s
        while got < records and time.perf_counter() < deadline:
            messages = consumer.consume(CONSUMER_BATCH, timeout=1.0)
            bad = next((m.error() for m in messages if m.error() is not None), None)
            if bad is not None:
                raise KafkaError(f"consume: {bad}")
            got += len(messages)
    finally:
        consumer.close()
    return got


def _consumer_config(bootstrap: str, extra: dict[str, Any]) -> dict[str, Any]:
    """A consumer of assigned partitions: no group membership, no commits."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "meridian-bench",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **extra,
    }


def kafka_paced_producer(
    bootstrap: str, topic: str, rate: int, count: int, value_bytes: int, queue: Any
) -> None:
    """Child process: ``produce()`` at ``rate``/s with ``linger.ms=0``, then ``flush()``;
    what falls due while five requests are in flight goes in the next one."""
    failed: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    config = {"bootstrap.servers": bootstrap, "acks": "1", **LATENCY_SOCKETS, **LATENCY_PRODUCER}
    producer = Producer({**config, "on_delivery": on_delivery})
    pacer = Pacer(rate, count)
    sent = 0
    for batch in pacer.batches():
        for seq, stamp in batch:
            _produce(producer, topic, stamped_value(seq, stamp, value_bytes))
        producer.poll(0)
        sent += len(batch)
    unsent = producer.flush(RPC_TIMEOUT_S)
    error = f"{unsent} undelivered, {len(failed)} failed {failed[:1]}" if unsent or failed else ""
    queue.put(pacer.report(sent, error))


def kafka_latency(
    server: KafkaServer, cleanup: Cleanup, plan: Plan, setting: str, topic: str = ""
) -> Latency:
    topic = server.create_topic(topic or f"latency-{slug(setting)}", setting)
    result = Latency(KAFKA, LATENCY_MODE, setting, plan.latency_rate)

    def consume(collector: LatencyCollector, deadline: float) -> None:
        extra = {**LATENCY_SOCKETS, "fetch.min.bytes": 1}
        consumer = Consumer(_consumer_config(server.bootstrap, extra))
        try:
            consumer.assign([TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
            while not collector.done and time.monotonic() < deadline:
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    collector.add(message.value())
        finally:
            consumer.close()

    return measure_latency(
        cleanup, result, plan, kafka_paced_producer, (server.bootstrap, topic), consume
    )


# -- the runs -----------------------------------------------------------------------------
def run_kafka(cleanup: Cleanup, plan: Plan, workloads: set[str]) -> list[Any]:
    """Every selected workload against one Kafka node."""
    results: list[Any] = []
    progress("Kafka: starting one KRaft node")
    server = KafkaServer(cleanup)
    try:
        warm_up(server, plan)
        for value_bytes in VALUE_SIZES:
            results += _kafka_cases(server, plan, workloads, value_bytes)
        if "latency" in workloads:
            progress("Kafka: latency warm-up (not reported)")
            kafka_latency(server, cleanup, warm_up_plan(plan), DEFAULT, "latency-warm-up")
            for setting in TOPIC_CONFIGS:
                progress(f"Kafka: latency at {plan.latency_rate:,}/s, {setting}")
                results.append(kafka_latency(server, cleanup, plan, setting))
    finally:
        server.stop()
    return results


def warm_up(server: KafkaServer, plan: Plan) -> None:
    """Untimed records through the broker and both clients, so that the JIT compiler has
    compiled Kafka's produce and fetch paths before anything is measured."""
    n = max(1, plan.records // 5)
    progress(f"Kafka: warming up with {n:,} x 100 B")
    topic = server.create_topic("warm-up")
    kafka_produce(server.bootstrap, topic, 100, n, plan.max_case_s * 3, "all")
    kafka_consume(server.bootstrap, topic, n, plan.max_case_s * 3)


def warm_up_plan(plan: Plan) -> Plan:
    """The latency run's own warm-up, and as long again: small produce requests and
    long-polling fetches take other paths through the broker than the big batches of
    ``warm_up`` do."""
    return dataclasses.replace(plan, latency_s=plan.latency_warmup_s)


def _kafka_cases(
    server: KafkaServer, plan: Plan, workloads: set[str], value_bytes: int
) -> list[Throughput]:
    results = []
    n = plan.records_for(value_bytes)
    if "produce" in workloads:
        for setting, acks in ((DEFAULT, "all"), (DEFAULT, "1"), (FLUSH_EACH, "all")):
            results.append(_produce_case(server, plan, value_bytes, setting, acks))
    if "consume" in workloads:
        topic = server.create_topic(f"consume-{value_bytes}")
        progress(f"Kafka: loading {n:,} x {value_bytes} B to read back")
        loaded = kafka_produce(server.bootstrap, topic, value_bytes, n, plan.max_case_s * 3, "1")
        progress(f"Kafka: consume() catch-up, {loaded:,} x {value_bytes} B")
        result = Throughput(KAFKA, "consume", CONSUME_MODE, value_bytes, DEFAULT)
        with stopwatch(result):
            result.records = kafka_consume(server.bootstrap, topic, loaded, plan.max_case_s)
        results.append(result)
    return results


def _produce_case(
    server: KafkaServer, plan: Plan, value_bytes: int, setting: str, acks: str
) -> Throughput:
    n = plan.records_for(value_bytes)
    topic = server.create_topic(f"produce-{value_bytes}-{acks}-{slug(setting)}", setting)
    progress(f"Kafka: produce() {n:,} x {value_bytes} B, acks={acks}, {setting}")
    result = Throughput(KAFKA, "produce", produce_mode(acks), value_bytes, setting)
    with stopwatch(result):
        result.records = kafka_produce(
            server.bootstrap, topic, value_bytes, n, plan.max_case_s, acks
        )
    return result
