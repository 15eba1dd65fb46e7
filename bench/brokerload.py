"""Meridian workloads of the broker benchmark: one broker process and what drives it.

Two ways in, for each workload:

- **the SDK** (``dataplane.client``): ``Producer.send`` record by record and
  ``Producer.send_batch`` ``SDK_SEND_BATCH`` records a call, ``Consumer.poll``; what an
  application gets.
- **raw gRPC** with prebuilt batches: RecordBatches of about ``PREBUILT_BATCH_BYTES``
  built once before timing and pushed over ``ProduceStream`` with ``PREBUILT_IN_FLIGHT``
  requests in flight; ``Fetch`` of ``FETCH_MAX_BYTES`` at a time, counting records from
  the batch headers. No client-side encoding or decoding: the broker's own ceiling.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from benchkit import (
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
)

from dataplane._gen.meridian.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
)
from dataplane.client.connection import CHANNEL_OPTIONS
from dataplane.client.types import TopicPartition
from dataplane.errors import MeridianError
from dataplane.local import LocalBroker, free_ports
from dataplane.records import BatchBuilder, build_batch, decode_batches

MERIDIAN = "Meridian"
PREBUILT_BATCH_BYTES = 1_000_000
PREBUILT_DISTINCT = 4
PREBUILT_IN_FLIGHT = 8
FETCH_MAX_BYTES = 8 * MiB
MAX_MESSAGE_BYTES = 4 * MiB
CREATE_CHUNK = 1000
SDK_LINGER_MS = 10
SDK_BATCH_BYTES = 1 * MiB
SDK_SEND_BATCH = 10_000  # records per Producer.send_batch call
SDK_SEND_BATCH_MODE = "SDK send_batch"
SDK_CONSUMER = {"max_poll_records": 10_000, "max_partition_fetch_bytes": 4 * MiB}
LATENCY_LINGER_MS = 0
SDK_LATENCY_MODE = "SDK send / poll"
BROKER_START_TIMEOUT_S = 300.0
RPC_TIMEOUT_S = 120.0

# baseOffset, batchLength; lastOffsetDelta at 23; recordCount at 57 (dataplane/records/layout.py).
_PREFIX = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_LOG_OVERHEAD = 12


@dataclass
class BenchBroker(LocalBroker):
    """A ``LocalBroker`` that dies with the benchmark even if the benchmark is killed, with
    both limits on open files set to ``fd_limit`` if given (the broker lifts its soft
    limit to the hard one, so a soft limit alone would not hold)."""

    fd_limit: int | None = None

    def command(self) -> list[str]:
        limit = [] if self.fd_limit is None else ["prlimit", f"--nofile={self.fd_limit}", "--"]
        return [*limit, *pdeathsig_prefix(), *super().command()]


class MeridianBroker:
    """One broker on 127.0.0.1 under ``root``, with raw Admin and Broker stubs."""

    def __init__(self, cleanup: Cleanup, root: Path, fd_limit: int | None = None) -> None:
        self.local = BenchBroker(1, free_ports(1)[0], root / "broker-1", fd_limit=fd_limit)
        cleanup.adopt(self.local)
        self.start()
        self.channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        self.admin = admin_pb2_grpc.AdminStub(self.channel)
        self.broker = broker_pb2_grpc.BrokerStub(self.channel)

    @property
    def address(self) -> str:
        return self.local.address

    @property
    def pid(self) -> int:
        assert self.local.process is not None
        return self.local.process.pid

    @property
    def data_dir(self) -> Path:
        return self.local.data_dir

    def start(self) -> float:
        """Starts the process; returns seconds until it reported ready."""
        started = time.perf_counter()
        self.local.start(BROKER_START_TIMEOUT_S)
        return time.perf_counter() - started

    def stop(self) -> float:
        started = time.perf_counter()
        code = self.local.stop(BROKER_START_TIMEOUT_S)
        if code not in (0, -15):
            progress(f"broker exited with {code} on SIGTERM")
        return time.perf_counter() - started

    def kill(self) -> None:
        self.local.kill()

    def create_topic(
        self, topic: str, partitions: int, durability: str = "interval", **config: Any
    ) -> None:
        """Creates ``topic`` with ``partitions`` partitions through Admin.CreatePartitions."""
        cfg = common_pb2.PartitionConfig(
            durability=durability, max_message_bytes=MAX_MESSAGE_BYTES, **config
        )
        for first in range(0, partitions, CREATE_CHUNK):
            specs = [
                admin_pb2.PartitionSpec(topic=topic, partition=p, config=cfg)
                for p in range(first, min(first + CREATE_CHUNK, partitions))
            ]
            request = admin_pb2.CreatePartitionsRequest(partitions=specs)
            response = self.admin.CreatePartitions(request, timeout=RPC_TIMEOUT_S)
            failed = [r for r in response.results if r.error]
            if failed:
                raise MeridianError(failed[0].error, f"{topic}: {failed[0].error_message}")

    def end_offset(self, topic: str, partition: int = 0) -> int:
        request = broker_pb2.ListOffsetsRequest(
            partitions=[
                broker_pb2.ListOffsetsPartition(topic=topic, partition=partition, timestamp=-1)
            ]
        )
        result = self.broker.ListOffsets(request, timeout=RPC_TIMEOUT_S).results[0]
        if result.error:
            raise MeridianError(result.error, result.error_message)
        return int(result.offset)

    def close(self) -> None:
        self.channel.close()


# -- prebuilt batches over raw gRPC -------------------------------------------------------
def build_batches(value_bytes: int, target_bytes: int = PREBUILT_BATCH_BYTES) -> list[bytes]:
    """``PREBUILT_DISTINCT`` batches of ``value_bytes`` values, each under ``target_bytes``."""
    batches = []
    for i in range(PREBUILT_DISTINCT):
        builder = BatchBuilder()
        value = bytes([65 + i]) * value_bytes
        while builder.estimated_size() + value_bytes + 16 < target_bytes:
            builder.append(value)
        batches.append(builder.build())
    return batches


def batch_records(batch: bytes) -> int:
    return _LAST_DELTA.unpack_from(batch, 23)[0] + 1


async def _produce_stream(
    address: str,
    targets: Sequence[tuple[str, int]],
    batches: Sequence[bytes],
    records: int,
    max_s: float,
    acks: int,
) -> int:
    """Sends batches round-robin over ``targets``; returns the records acknowledged."""
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        call = broker_pb2_grpc.BrokerStub(channel).ProduceStream()
        window = asyncio.Semaphore(PREBUILT_IN_FLIGHT)
        per_batch = [batch_records(b) for b in batches]
        counts: list[int] = []
        reader = asyncio.create_task(_read_acks(call, window, counts))
        sent, i = 0, 0
        deadline = time.perf_counter() + max_s
        while sent < records and time.perf_counter() < deadline and not reader.done():
            await window.acquire()
            topic, partition = targets[i % len(targets)]
            batch = batches[i % len(batches)]
            part = broker_pb2.PartitionRecords(topic=topic, partition=partition, records=batch)
            counts.append(per_batch[i % len(batches)])
            await call.write(
                broker_pb2.ProduceRequest(acks=acks, partitions=[part], correlation_id=i)
            )
            sent += counts[-1]
            i += 1
        await call.done_writing()
        return await reader


async def _read_acks(call: Any, window: asyncio.Semaphore, counts: list[int]) -> int:
    acked, n = 0, 0
    while True:
        response = await call.read()
        if response is grpc.aio.EOF:
            return acked
        for result in response.results:
            if result.error:
                raise MeridianError(result.error, f"produce: {result.error_message}")
        acked += counts[n]
        n += 1
        window.release()


def produce_prebuilt(
    address: str,
    targets: Sequence[tuple[str, int]],
    batches: Sequence[bytes],
    records: int,
    max_s: float,
    acks: int = 1,
) -> int:
    return asyncio.run(_produce_stream(address, targets, batches, records, max_s, acks))


def count_from(data: bytes, fetch_offset: int) -> tuple[int, int]:
    """(records at or after ``fetch_offset``, next offset) of whole batches in ``data``."""
    pos, records, next_offset = 0, 0, fetch_offset
    view = memoryview(data)
    while pos + _LOG_OVERHEAD <= len(view):
        base, length = _PREFIX.unpack_from(view, pos)
        last = base + _LAST_DELTA.unpack_from(view, pos + 23)[0]
        records += last - max(base, next_offset) + 1
        next_offset = last + 1
        pos += _LOG_OVERHEAD + length
    return records, next_offset


async def _fetch_all(address: str, topic: str, end: int, max_s: float) -> int:
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        offset, got = 0, 0
        deadline = time.perf_counter() + max_s
        while offset < end and time.perf_counter() < deadline:
            part = broker_pb2.FetchPartition(
                topic=topic, partition=0, fetch_offset=offset, partition_max_bytes=FETCH_MAX_BYTES
            )
            request = broker_pb2.FetchRequest(
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=FETCH_MAX_BYTES,
                partitions=[part],
                replica_id=-1,
            )
            result = (await stub.Fetch(request, timeout=RPC_TIMEOUT_S)).results[0]
            if result.error:
                raise MeridianError(result.error, f"fetch: {result.error_message}")
            n, offset = count_from(result.records, offset)
            got += n
        return got


def fetch_all(address: str, topic: str, end: int, max_s: float) -> int:
    return asyncio.run(_fetch_all(address, topic, end, max_s))


# -- the SDK ------------------------------------------------------------------------------
def sdk(name: str) -> Any:
    """``dataplane.client.<name>``, or from its module while the package does not export it."""
    import importlib

    import dataplane.client as client

    if hasattr(client, name):
        return getattr(client, name)
    return getattr(importlib.import_module(f"dataplane.client.{name.lower()}"), name)


def sdk_produce(
    bootstrap: str, topic: str, value_bytes: int, records: int, max_s: float, acks: int | str = 1
) -> int:
    """``Producer.send`` ``records`` values, then ``flush``; returns the records sent."""
    value = b"x" * value_bytes
    producer = sdk("Producer")(
        bootstrap, acks=acks, linger_ms=SDK_LINGER_MS, batch_bytes=SDK_BATCH_BYTES
    )
    sampled = []
    sent = 0
    deadline = time.perf_counter() + max_s
    try:
        while sent < records and time.perf_counter() < deadline:
            for _ in range(min(10_000, records - sent)):
                future = producer.send(topic, value)
            sampled.append(future)
            sent += min(10_000, records - sent)
        producer.flush()
        for future in sampled:
            future.result(timeout=RPC_TIMEOUT_S)
    finally:
        producer.close()
    return sent


def sdk_produce_batch(
    bootstrap: str, topic: str, value_bytes: int, records: int, max_s: float, acks: int | str
) -> int:
    """``Producer.send_batch`` of ``SDK_SEND_BATCH`` values at a time, then ``flush``;
    returns the records sent, every one acknowledged (with ``acks`` above 0)."""
    value = b"x" * value_bytes
    producer = sdk("Producer")(
        bootstrap, acks=acks, linger_ms=SDK_LINGER_MS, batch_bytes=SDK_BATCH_BYTES
    )
    calls = []
    sent = 0
    deadline = time.perf_counter() + max_s
    try:
        while sent < records and time.perf_counter() < deadline:
            chunk = [value] * min(SDK_SEND_BATCH, records - sent)
            calls.append(producer.send_batch(topic, chunk))
            sent += len(chunk)
        producer.flush()
        for futures in calls:
            if futures.exception(timeout=RPC_TIMEOUT_S) is not None:
                raise futures.exception()
    finally:
        producer.close()
    return sent


def sdk_consume(bootstrap: str, topic: str, records: int, max_s: float, **settings: Any) -> int:
    """``Consumer.poll`` from the start of partition 0 (``settings``: more of the
    consumer's); returns the records received."""
    consumer = sdk("Consumer")(bootstrap, group_id=None, **SDK_CONSUMER, **settings)
    got = 0
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning([tp])
        deadline = time.perf_counter() + max_s
        while got < records and time.perf_counter() < deadline:
            got += len(consumer.poll(timeout_ms=1000))
    finally:
        consumer.close()
    return got


def sdk_paced_producer(
    bootstrap: str, topic: str, rate: int, count: int, value_bytes: int, queue: Any
) -> None:
    """Child process: ``Producer.send`` at ``rate``/s with ``linger_ms=0``, then flush."""
    pacer = Pacer(rate, count)
    sent, error = 0, ""
    producer = sdk("Producer")(bootstrap, acks=1, linger_ms=LATENCY_LINGER_MS)
    try:
        for seq, stamp in pacer:
            producer.send(topic, stamped_value(seq, stamp, value_bytes))
            sent += 1
        producer.flush()
    except MeridianError as exc:
        error = repr(exc)
    finally:
        producer.close()
    queue.put(pacer.report(sent, error))


def sdk_latency(broker: MeridianBroker, cleanup: Cleanup, plan: Plan, durability: str) -> Latency:
    topic = f"bench.latency-{durability}"
    broker.create_topic(topic, 1, durability)
    result = Latency(MERIDIAN, SDK_LATENCY_MODE, durability, plan.latency_rate)

    def consume(collector: LatencyCollector, deadline: float) -> None:
        consumer = sdk("Consumer")(broker.address, group_id=None)
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning([tp])
            while not collector.done and time.monotonic() < deadline:
                for record in consumer.poll(timeout_ms=100):
                    collector.add(record.value)
        finally:
            consumer.close()

    return measure_latency(
        cleanup, result, plan, sdk_paced_producer, (broker.address, topic), consume
    )


def raw_paced_producer(
    address: str, topic: str, rate: int, count: int, value_bytes: int, queue: Any
) -> None:
    """Child process: unary ``Produce`` at ``rate``/s, one request at a time; what fell due
    while a reply was awaited goes in one batch (as a producer with linger 0 does)."""
    pacer = Pacer(rate, count)
    sent, error = 0, ""
    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        try:
            for batch in pacer.batches():
                records = build_batch([stamped_value(seq, t, value_bytes) for seq, t in batch])
                part = broker_pb2.PartitionRecords(topic=topic, partition=0, records=records)
                request = broker_pb2.ProduceRequest(acks=1, partitions=[part])
                result = stub.Produce(request, timeout=RPC_TIMEOUT_S).results[0]
                if result.error:
                    raise MeridianError(result.error, result.error_message)
                sent += len(batch)
        except (MeridianError, grpc.RpcError) as exc:
            error = repr(exc)
    queue.put(pacer.report(sent, error))


def raw_latency(broker: MeridianBroker, cleanup: Cleanup, plan: Plan) -> Latency:
    """Latency through the broker alone: raw Produce, and Fetch long-polls (500 ms)."""
    topic = "bench.latency-raw"
    broker.create_topic(topic, 1, "interval")
    result = Latency(MERIDIAN, "raw Produce / Fetch", "interval", plan.latency_rate)

    def consume(collector: LatencyCollector, deadline: float) -> None:
        offset = 0
        while not collector.done and time.monotonic() < deadline:
            part = broker_pb2.FetchPartition(topic=topic, partition=0, fetch_offset=offset)
            request = broker_pb2.FetchRequest(
                max_wait_ms=500, min_bytes=1, max_bytes=FETCH_MAX_BYTES, partitions=[part]
            )
            request.replica_id = -1
            fetched = broker.broker.Fetch(request, timeout=RPC_TIMEOUT_S).results[0]
            if fetched.error:
                raise MeridianError(fetched.error, fetched.error_message)
            now = time.monotonic_ns()
            for record in decode_batches(fetched.records):
                if record.offset >= offset and record.value is not None:
                    collector.add(record.value, now)
                    offset = record.offset + 1

    return measure_latency(
        cleanup, result, plan, raw_paced_producer, (broker.address, topic), consume
    )


# -- the runs -----------------------------------------------------------------------------
def run_meridian(
    cleanup: Cleanup, root: Path, plan: Plan, workloads: set[str], sdk: set[str]
) -> list[Any]:
    """Every selected workload against one broker; SDK rows need their class in ``sdk``."""
    results: list[Any] = []
    broker = MeridianBroker(cleanup, root)
    try:
        for value_bytes in (100, 1024):
            if "produce" in workloads:
                results += produce_cases(broker, plan, value_bytes, "Producer" in sdk)
            if "consume" in workloads:
                results += consume_cases(broker, plan, value_bytes, "Consumer" in sdk)
        if "latency" in workloads:
            progress(f"Meridian: latency at {plan.latency_rate:,}/s, raw gRPC")
            results.append(raw_latency(broker, cleanup, plan))
        if "latency" in workloads and {"Producer", "Consumer"} <= sdk:
            for durability in ("interval", "always"):
                progress(f"Meridian: latency at {plan.latency_rate:,}/s, {durability}")
                results.append(sdk_latency(broker, cleanup, plan, durability))
    finally:
        broker.close()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    return results


def produce_cases(
    broker: MeridianBroker, plan: Plan, value_bytes: int, sdk: bool
) -> list[Throughput]:
    results = []
    batches = build_batches(value_bytes)
    for durability in ("interval", "always"):
        topic = f"bench.prebuilt-{value_bytes}-{durability}"
        broker.create_topic(topic, 1, durability)
        n = plan.records_for(value_bytes, prebuilt=True)
        progress(f"Meridian: prebuilt batches, {n:,} x {value_bytes} B, {durability}")
        result = Throughput(MERIDIAN, "produce", "prebuilt batches", value_bytes, durability)
        with stopwatch(result):
            result.records = produce_prebuilt(
                broker.address, [(topic, 0)], batches, n, plan.max_case_s
            )
        results.append(result)
        if sdk:
            topic = f"bench.sdk-{value_bytes}-{durability}"
            broker.create_topic(topic, 1, durability)
            n = plan.records_for(value_bytes)
            progress(f"Meridian: SDK producer, {n:,} x {value_bytes} B, {durability}")
            result = Throughput(MERIDIAN, "produce", "SDK Producer", value_bytes, durability)
            with stopwatch(result):
                result.records = sdk_produce(broker.address, topic, value_bytes, n, plan.max_case_s)
            results.append(result)
            results += batch_cases(broker, plan, value_bytes, durability)
    return results


def batch_cases(
    broker: MeridianBroker, plan: Plan, value_bytes: int, durability: str
) -> list[Throughput]:
    """``Producer.send_batch``, acks=1 and (with ``interval``) acks=all; on one broker the
    in-sync replicas are the leader alone, so acks=all waits for nothing more here."""
    results = []
    for acks in (1, "all") if durability == "interval" else (1,):
        topic = f"bench.sdk-batch-{value_bytes}-{durability}-{acks}"
        broker.create_topic(topic, 1, durability)
        n = plan.records_for(value_bytes)
        mode = SDK_SEND_BATCH_MODE + ("" if acks == 1 else ", acks=all")
        progress(f"Meridian: {mode}, {n:,} x {value_bytes} B, {durability}")
        result = Throughput(MERIDIAN, "produce", mode, value_bytes, durability)
        with stopwatch(result):
            result.records = sdk_produce_batch(
                broker.address, topic, value_bytes, n, plan.max_case_s, acks
            )
        results.append(result)
    return results


def consume_cases(
    broker: MeridianBroker, plan: Plan, value_bytes: int, sdk: bool
) -> list[Throughput]:
    """Loads a topic with prebuilt batches, then reads it back from the start."""
    topic = f"bench.consume-{value_bytes}"
    broker.create_topic(topic, 1, "interval")
    n = plan.records_for(value_bytes)
    progress(f"Meridian: loading {n:,} x {value_bytes} B to read back")
    produce_prebuilt(
        broker.address, [(topic, 0)], build_batches(value_bytes), n, plan.max_case_s * 3
    )
    end = broker.end_offset(topic)
    results = []
    progress(f"Meridian: raw Fetch catch-up, {end:,} x {value_bytes} B")
    result = Throughput(MERIDIAN, "consume", "raw Fetch 8 MiB", value_bytes, "interval")
    with stopwatch(result):
        result.records = fetch_all(broker.address, topic, end, plan.max_case_s)
    results.append(result)
    if sdk:
        progress(f"Meridian: SDK Consumer catch-up, {end:,} x {value_bytes} B")
        result = Throughput(MERIDIAN, "consume", "SDK Consumer", value_bytes, "interval")
        with stopwatch(result):
            result.records = sdk_consume(broker.address, topic, end, plan.max_case_s)
        results.append(result)
    return results
