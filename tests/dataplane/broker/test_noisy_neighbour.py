"""The noisy neighbour: tenant A producing far over its produce quota is throttled to its
rate, and tenant B's latency stays within 2x of its value while A is idle.

One broker process. A runs in a process of its own (``noisy_producer``: two SDK
producers sending as fast as their buffers allow), so this process's CPU is B's alone.
B sends one small record at a time and times each acknowledgement: first with A idle,
then while A runs, then in rounds with A paused (SIGSTOP) and running again, so load
from outside the test falls on both sides alike. A's rate is measured from its
acknowledgements over a window of several seconds after a warm-up; then a new push
lifts A's quota, and A's unthrottled rate shows how far over the quota it was asking.
The figures are printed. B's p50 and p99 with A running are compared with those with A
idle (ratios within one run), never with absolute times.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc
from dataplane.client import Admin, Producer
from tests.support.brokers import REPO_ROOT, BrokerProcess

MIB = 1024 * 1024
QUOTA_BYTES_PER_S = 1 * MIB
RECORD_BYTES = 16 * 1024
FREE_RUN_S = 2.0  # A unthrottled at the end, to show how far over its quota it goes
WARM_UP_S = 4.0
WINDOW_S = 8.0
B_SAMPLES = 400
B_INTERVAL_S = 0.01
ROUNDS = 6
SETTLE_S = 0.3


class NoisyTenant:
    """The ``noisy_producer`` process and the progress lines it prints."""

    def __init__(self, bootstrap: str, topic: str, producers: int) -> None:
        command = [sys.executable, "-m", "tests.dataplane.broker.noisy_producer"]
        command += [bootstrap, topic, str(producers), str(RECORD_BYTES)]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT
        )
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.append(json.loads(raw))

    def acked_at(self, moment: float) -> tuple[float, int]:
        """The first progress line at or after ``moment`` (monotonic): (time, acked)."""
        while True:
            for line in list(self.lines):
                if line["t"] >= moment:
                    return line["t"], line["acked"]
            assert self.process.poll() is None, "the noisy producer exited"
            time.sleep(0.05)

    def first_ack(self) -> float:
        """The time of the first progress line with acknowledged bytes."""
        while True:
            for line in list(self.lines):
                if line["acked"] > 0:
                    return float(line["t"])
            assert self.process.poll() is None, "the noisy producer exited"
            time.sleep(0.05)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def noisy(broker: BrokerProcess) -> Iterator[list[NoisyTenant]]:
    started: list[NoisyTenant] = []
    try:
        yield started
    finally:
        for tenant in started:
            tenant.stop()


def push_quota(broker: BrokerProcess, epoch: int, produce_bytes_per_s: int) -> None:
    """A push limiting tenant ``noisy`` (0: unlimited)."""
    quota = admin_pb2.TenantQuota(tenant="noisy", produce_bytes_per_s=produce_bytes_per_s)
    request = admin_pb2.UpdateMetadataRequest(
        controller_id="test", controller_epoch=epoch, cluster_id="meridian", quotas=[quota]
    )
    with broker.channel() as channel:
        admin_pb2_grpc.AdminStub(channel).UpdateMetadata(request, timeout=10)


def b_latencies(producer: Producer, samples: int) -> list[float]:
    """Seconds from send to acknowledgement of ``samples`` small records, one at a time."""
    out = []
    for i in range(samples):
        started = time.perf_counter()
        producer.send("quiet.events", b"b%d" % i, partition=0).result(30)
        out.append(time.perf_counter() - started)
        time.sleep(B_INTERVAL_S)
    return out


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def test_a_tenant_over_its_quota_is_held_to_it_and_does_not_slow_another(
    broker: BrokerProcess, noisy: list[NoisyTenant]
) -> None:
    with Admin(broker.address) as admin:
        admin.create_topic("noisy.flood", 2, {"durability": "never"})
        admin.create_topic("quiet.events", 1, {"durability": "never"})
    push_quota(broker, 1, QUOTA_BYTES_PER_S)
    with Producer(broker.address, linger_ms=0) as quiet:
        b_latencies(quiet, 20)  # connections, metadata and the stream are ready
        unloaded = b_latencies(quiet, B_SAMPLES)

        noisy.append(NoisyTenant(broker.address, "noisy.flood", producers=2))
        window_start, acked_start = noisy[0].acked_at(noisy[0].first_ack() + WARM_UP_S)
        loaded = b_latencies(quiet, B_SAMPLES)
        window_end, acked_end = noisy[0].acked_at(max(time.monotonic(), window_start + WINDOW_S))
        # Alternate A paused / running, so load from outside this test (a shared machine)
        # falls on both sides of the comparison alike.
        for _ in range(ROUNDS):
            noisy[0].process.send_signal(signal.SIGSTOP)
            time.sleep(SETTLE_S)
            unloaded += b_latencies(quiet, B_SAMPLES // 4)
            noisy[0].process.send_signal(signal.SIGCONT)
            time.sleep(SETTLE_S)
            loaded += b_latencies(quiet, B_SAMPLES // 4)

    # Then the quota is lifted by a new push: how far over it A goes when it may.
    push_quota(broker, 2, 0)
    free_start, free_acked_start = noisy[0].acked_at(time.monotonic() + 0.5)
    free_end, free_acked_end = noisy[0].acked_at(free_start + FREE_RUN_S)
    free_rate = (free_acked_end - free_acked_start) / (free_end - free_start)
    rate = (acked_end - acked_start) / (window_end - window_start)
    p50_ratio = statistics.median(loaded) / statistics.median(unloaded)
    p99_ratio = percentile(loaded, 0.99) / percentile(unloaded, 0.99)
    figures = (
        f"\nnoisy tenant: unthrottled {free_rate / MIB:.2f} MiB/s; quota "
        f"{QUOTA_BYTES_PER_S / MIB:.2f} MiB/s, acknowledged {rate / MIB:.3f} MiB/s over "
        f"{window_end - window_start:.1f} s ({rate / QUOTA_BYTES_PER_S:.1%} of the quota)"
        f"\nquiet tenant ({len(unloaded)}/{len(loaded)} records): unloaded p50 "
        f"{statistics.median(unloaded) * 1000:.2f} ms p99 {percentile(unloaded, 0.99) * 1000:.2f}"
        f" ms; loaded p50 {statistics.median(loaded) * 1000:.2f} ms p99 "
        f"{percentile(loaded, 0.99) * 1000:.2f} ms; ratios p50 {p50_ratio:.2f} p99 {p99_ratio:.2f}"
    )
    print(figures)
    assert free_rate >= 3 * QUOTA_BYTES_PER_S, figures  # A asks far more than its quota
    assert window_end - window_start >= WINDOW_S * 0.9, figures
    assert abs(rate - QUOTA_BYTES_PER_S) <= 0.10 * QUOTA_BYTES_PER_S, figures
    assert p50_ratio <= 2.0, figures
    assert p99_ratio <= 2.0, figures
