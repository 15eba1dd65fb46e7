"""The peers of the broker benchmark: Redis Streams and NATS JetStream.

Each peer runs as Debian ships it, started by the benchmark on 127.0.0.1 with its data
in a temporary directory, and is driven by its own Python client in that client's fastest
mode:

- **Redis Streams** (redis-server, redis-py): ``XADD`` in pipelines of
  ``REDIS_PIPELINE`` commands (no transaction); catch-up with ``XRANGE`` in chunks of
  ``REDIS_READ_CHUNK``; latency with a blocking ``XREAD``. The append-only file is on,
  with ``appendfsync everysec`` and, for a second produce row, ``always`` (Redis then
  fsyncs once per event-loop iteration, so a whole pipeline shares one fsync).
- **NATS JetStream** (nats-server -js, nats-py): ``publish_async`` with up to
  ``NATS_IN_FLIGHT`` publishes awaiting their acks; catch-up with a pull consumer
  fetching ``NATS_FETCH`` messages per request, no acks; latency with a push (ordered)
  consumer. A file-storage stream with the server's default sync policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from typing import Any

import nats
import redis
from benchkit import (
    VALUE_SIZES,
    Cleanup,
    Latency,
    LatencyCollector,
    Pacer,
    Plan,
    Throughput,
    measure_latency,
    progress,
    stamped_value,
    stopwatch,
    wait_until,
)
from nats.js import api as js_api

from dataplane.local import free_ports

REDIS_PIPELINE = 10_000
REDIS_READ_CHUNK = 10_000
NATS_IN_FLIGHT = 10_000
NATS_FETCH = 5_000
READY_TIMEOUT_S = 20.0
REDIS = "Redis Streams"
NATS = "NATS JetStream"

REDIS_FSYNC = {
    "everysec": "appendonly yes, appendfsync everysec (fsync once a second, in the background)",
    "always": "appendonly yes, appendfsync always (fsync before replying, once per event loop)",
}
NATS_FSYNC = (
    "file storage, default sync policy: written to the OS at once, no fsync per message; "
    "periodic fsync (2 min by default; nats-server 2.9 cannot change it)"
)


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise RuntimeError(f"{binary} is not installed (./dev bench installs it)")
    return path


def server_version(binary: str) -> str:
    if shutil.which(binary) is None:  # only the peers part needs it
        return "not installed"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).strip().splitlines()[0] if out.returncode == 0 else "?"


# -- Redis Streams ------------------------------------------------------------------------
class RedisServer:
    """``redis-server`` on a free port of 127.0.0.1, AOF in a temporary directory."""

    def __init__(self, cleanup: Cleanup) -> None:
        self.cleanup = cleanup
        self.dir = cleanup.mkdtemp("redis-")
        self.port = free_ports(1)[0]
        args = [require("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "everysec"]
        args += ["--save", "", "--daemonize", "no", "--protected-mode", "yes"]
        self.process = cleanup.popen(args, log=self.dir / "redis.log")
        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        wait_until(self._pings, READY_TIMEOUT_S, "redis-server start")

    def _pings(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"redis-server exited: {(self.dir / 'redis.log').read_text()}")
        try:
            return bool(self.client.ping())
        except redis.ConnectionError:
            return False

    def set_fsync(self, mode: str) -> None:
        self.client.config_set("appendfsync", mode)

    def stop(self) -> None:
        self.client.close()
        self.cleanup.stop_process(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)


def redis_produce(server: RedisServer, value_bytes: int, records: int, max_s: float) -> int:
    """XADD ``records`` values in pipelines; returns how many were added in time."""
    value = b"x" * value_bytes
    key = f"bench:{value_bytes}"
    server.client.delete(key)
    sent = 0
    deadline = time.perf_counter() + max_s
    while sent < records and time.perf_counter() < deadline:
        pipe = server.client.pipeline(transaction=False)
        n = min(REDIS_PIPELINE, records - sent)
        for _ in range(n):
            pipe.xadd(key, {"v": value})
        pipe.execute()
        sent += n
    return sent


def redis_consume(server: RedisServer, value_bytes: int, records: int, max_s: float) -> int:
    """XRANGE the stream from its start in chunks; returns how many records were read."""
    key = f"bench:{value_bytes}"
    start: bytes | str = "-"
    got = 0
    deadline = time.perf_counter() + max_s
    while got < records and time.perf_counter() < deadline:
        entries = server.client.xrange(key, min=start, max="+", count=REDIS_READ_CHUNK)
        if not entries:
            break
        got += len(entries)
        start = b"(" + entries[-1][0]
    return got


def redis_paced_producer(
    port: int, key: str, rate: int, count: int, value_bytes: int, queue: Any
) -> None:
    """Child process: XADD at ``rate``/s; what fell due while a reply was awaited goes in
    one pipeline (a round trip takes ~0.2 ms on this VM's loopback, so one XADD at a time
    cannot keep 5,000/s)."""
    client = redis.Redis(host="127.0.0.1", port=port)
    pacer = Pacer(rate, count)
    sent, error = 0, ""
    try:
        for batch in pacer.batches():
            pipe = client.pipeline(transaction=False)
            for seq, stamp in batch:
                pipe.xadd(key, {"v": stamped_value(seq, stamp, value_bytes)})
            pipe.execute()
            sent += len(batch)
    except redis.RedisError as exc:
        error = repr(exc)
    queue.put(pacer.report(sent, error))


def redis_latency(server: RedisServer, cleanup: Cleanup, plan: Plan) -> Latency:
    key = "bench:latency"
    server.client.delete(key)
    result = Latency(REDIS, "XADD pipelined / XREAD BLOCK", "everysec", plan.latency_rate)

    def consume(collector: LatencyCollector, deadline: float) -> None:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        last: bytes | str = "0-0"
        while not collector.done and time.monotonic() < deadline:
            reply = client.xread({key: last}, count=1000, block=100)
            for _stream, entries in reply or ():
                now = time.monotonic_ns()
                for entry_id, fields in entries:
                    collector.add(fields[b"v"], now)
                    last = entry_id
        client.close()

    return measure_latency(cleanup, result, plan, redis_paced_producer, (server.port, key), consume)


def run_redis(cleanup: Cleanup, plan: Plan, workloads: set[str]) -> list[Any]:
    """Every selected workload against one redis-server."""
    results: list[Any] = []
    server = RedisServer(cleanup)
    try:
        for value_bytes in VALUE_SIZES:
            results += _redis_cases(server, plan, workloads, value_bytes)
        if "latency" in workloads:
            progress(f"Redis: latency at {plan.latency_rate:,}/s")
            results.append(redis_latency(server, cleanup, plan))
    finally:
        server.stop()
    return results


def _redis_cases(
    server: RedisServer, plan: Plan, workloads: set[str], value_bytes: int
) -> list[Throughput]:
    results = []
    n = plan.records_for(value_bytes)
    if "produce" in workloads:
        for mode in REDIS_FSYNC:
            server.set_fsync(mode)
            progress(f"Redis: XADD {n:,} x {value_bytes} B, appendfsync {mode}")
            result = Throughput(REDIS, "produce", "pipelined XADD", value_bytes, mode)
            with stopwatch(result):
                result.records = redis_produce(server, value_bytes, n, plan.max_case_s)
            results.append(result)
        server.set_fsync("everysec")
    if "consume" in workloads:
        if "produce" not in workloads:
            redis_produce(server, value_bytes, n, plan.max_case_s * 3)
        progress(f"Redis: XRANGE catch-up, {value_bytes} B")
        result = Throughput(REDIS, "consume", "XRANGE chunks", value_bytes, "everysec")
        with stopwatch(result):
            result.records = redis_consume(server, value_bytes, n, plan.max_case_s)
        results.append(result)
    server.client.delete(f"bench:{value_bytes}")
    return results


# -- NATS JetStream -----------------------------------------------------------------------
class NatsServer:
    """``nats-server -js`` on a free port of 127.0.0.1, file store in a temporary directory."""

    def __init__(self, cleanup: Cleanup) -> None:
        self.cleanup = cleanup
        self.dir = cleanup.mkdtemp("nats-")
        self.port = free_ports(1)[0]
        args = [require("nats-server"), "-js", "-a", "127.0.0.1", "-p", str(self.port)]
        args += ["-sd", str(self.dir / "store")]
        self.process = cleanup.popen(args, log=self.dir / "nats.log")
        wait_until(self._ready, READY_TIMEOUT_S, "nats-server start")

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"nats-server exited: {(self.dir / 'nats.log').read_text()}")
        return "Server is ready" in (self.dir / "nats.log").read_text(errors="replace")

    def stop(self) -> None:
        self.cleanup.stop_process(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)


async def _connect(url: str) -> Any:
    return await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)


async def _fresh_stream(js: Any, name: str) -> str:
    """A new file-storage stream ``name`` on subject ``bench.<name>``; returns the subject."""
    with contextlib.suppress(Exception):
        await js.delete_stream(name)
    subject = f"bench.{name}"
    await js.add_stream(name=name, subjects=[subject], storage=js_api.StorageType.FILE)
    return subject


async def nats_produce(url: str, name: str, value_bytes: int, records: int, max_s: float) -> int:
    """publish_async ``records`` values, ``NATS_IN_FLIGHT`` at most awaiting their acks."""
    nc = await _connect(url)
    js = nc.jetstream(publish_async_max_pending=NATS_IN_FLIGHT, timeout=30)
    subject = await _fresh_stream(js, name)
    value = b"x" * value_bytes
    failed: list[BaseException] = []

    def check(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            failed.append(future.exception())  # type: ignore[arg-type]

    sent = 0
    deadline = time.perf_counter() + max_s
    while sent < records and (sent % 1000 or time.perf_counter() < deadline):
        future = await js.publish_async(subject, value)
        future.add_done_callback(check)
        sent += 1
    await asyncio.wait_for(js.publish_async_completed(), 60)
    await nc.close()
    if failed:
        raise RuntimeError(f"{len(failed)} JetStream publishes failed, first: {failed[0]!r}")
    return sent


async def nats_consume(url: str, name: str, records: int, max_s: float) -> int:
    """Pull-fetch the stream from its start, ``NATS_FETCH`` per request, without acks."""
    nc = await _connect(url)
    js = nc.jetstream(timeout=30)
    config = js_api.ConsumerConfig(
        ack_policy=js_api.AckPolicy.NONE, deliver_policy=js_api.DeliverPolicy.ALL
    )
    sub = await js.pull_subscribe(f"bench.{name}", stream=name, config=config)
    got = 0
    deadline = time.perf_counter() + max_s
    while got < records and time.perf_counter() < deadline:
        try:
            msgs = await sub.fetch(min(NATS_FETCH, records - got), timeout=5)
        except nats.errors.TimeoutError:
            break
        got += len(msgs)
    await nc.close()
    return got


def nats_paced_producer(
    url: str, name: str, rate: int, count: int, value_bytes: int, queue: Any
) -> None:
    """Child process: one JetStream ``publish_async`` per record at ``rate``/s."""
    queue.put(asyncio.run(_nats_paced(url, name, rate, count, value_bytes)))


async def _nats_paced(url: str, name: str, rate: int, count: int, value_bytes: int) -> Any:
    nc = await _connect(url)
    js = nc.jetstream(timeout=10, publish_async_max_pending=NATS_IN_FLIGHT)
    pacer = Pacer(rate, count)
    sent, error = 0, ""
    try:
        # The pacer sleeps outside the event loop (asyncio's sleeps round up to whole ms);
        # the two yields after each round of publishes let the client flush them and read
        # acks. What fell due meanwhile is published in one round.
        for batch in pacer.batches():
            for seq, stamp in batch:
                await js.publish_async(f"bench.{name}", stamped_value(seq, stamp, value_bytes))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            sent += len(batch)
        await asyncio.wait_for(js.publish_async_completed(), 30)
    except Exception as exc:  # reported with the figures, not raised in a child
        error = repr(exc)
    await nc.close()
    return pacer.report(sent, error)


def nats_latency(server: NatsServer, cleanup: Cleanup, plan: Plan) -> Latency:
    name = "LATENCY"

    async def create() -> None:
        nc = await _connect(server.url)
        await _fresh_stream(nc.jetstream(), name)
        await nc.close()

    asyncio.run(create())
    result = Latency(NATS, "publish_async / push consumer", "default", plan.latency_rate)

    def consume(collector: LatencyCollector, deadline: float) -> None:
        asyncio.run(_nats_collect(server.url, name, collector, deadline))

    return measure_latency(cleanup, result, plan, nats_paced_producer, (server.url, name), consume)


async def _nats_collect(url: str, name: str, collector: LatencyCollector, deadline: float) -> None:
    nc = await _connect(url)
    js = nc.jetstream()

    async def on_message(msg: Any) -> None:
        collector.add(msg.data)

    sub = await js.subscribe(f"bench.{name}", stream=name, cb=on_message, ordered_consumer=True)
    while not collector.done and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await sub.unsubscribe()
    await nc.close()


def run_nats(cleanup: Cleanup, plan: Plan, workloads: set[str]) -> list[Any]:
    """Every selected workload against one nats-server."""
    results: list[Any] = []
    server = NatsServer(cleanup)
    try:
        for value_bytes in VALUE_SIZES:
            results += _nats_cases(server, plan, workloads, value_bytes)
        if "latency" in workloads:
            progress(f"NATS: latency at {plan.latency_rate:,}/s")
            results.append(nats_latency(server, cleanup, plan))
    finally:
        server.stop()
    return results


def _nats_cases(
    server: NatsServer, plan: Plan, workloads: set[str], value_bytes: int
) -> list[Throughput]:
    results = []
    n = plan.records_for(value_bytes)
    name = f"B{value_bytes}"
    if "produce" in workloads or "consume" in workloads:
        progress(f"NATS: publish_async {n:,} x {value_bytes} B")
        result = Throughput(NATS, "produce", "publish_async", value_bytes, "default")
        with stopwatch(result):
            result.records = asyncio.run(
                nats_produce(server.url, name, value_bytes, n, plan.max_case_s)
            )
        if "produce" in workloads:
            results.append(result)
    if "consume" in workloads:
        progress(f"NATS: pull fetch catch-up, {value_bytes} B")
        result = Throughput(NATS, "consume", f"pull fetch {NATS_FETCH:,}", value_bytes, "default")
        with stopwatch(result):
            result.records = asyncio.run(nats_consume(server.url, name, n, plan.max_case_s))
        results.append(result)
    return results
