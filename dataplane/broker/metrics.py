"""Prometheus metrics of one broker, in a registry of its own (several brokers may share
a process in tests), served over HTTP by ``serve``.

Counters and histograms (updated on the request path):

- ``meridian_broker_bytes_in_total{topic}`` / ``meridian_broker_bytes_out_total{topic}``:
  record bytes appended / returned by fetches;
- ``meridian_broker_requests_total{rpc,error}``: requests by RPC and ``ErrorCode`` name
  (``NONE`` for success);
- ``meridian_broker_request_seconds{rpc}``: latency histograms.

Gauges computed at scrape time from the hosted logs and the group coordinator:

- ``meridian_partition_log_end_offset``, ``meridian_partition_high_watermark``,
  ``meridian_partition_log_start_offset``, ``meridian_partition_size_bytes``
  (``{topic,partition}``);
- ``meridian_group_lag{group,topic,partition}``: local high watermark minus the
  group's committed offset, for partitions hosted here;
- ``meridian_broker_uptime_seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from dataplane.broker.config import parse_address
from dataplane.storage.log import PartitionLog

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)

LogsFn = Callable[[], Iterable[tuple[str, int, PartitionLog]]]
CommittedFn = Callable[[], dict[str, dict[tuple[str, int], int]]]


class _StateCollector(Collector):
    def __init__(self, logs: LogsFn, committed: CommittedFn | None, started: float) -> None:
        self._logs = logs
        self._committed = committed
        self._started = started

    def collect(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        families = {
            name: GaugeMetricFamily(f"meridian_partition_{name}", doc, labels=labels)
            for name, doc in (
                ("log_end_offset", "The offset the next appended record gets"),
                ("high_watermark", "The end of what consumers may read"),
                ("log_start_offset", "The first offset still stored"),
                ("size_bytes", "Bytes of the partition's segments"),
            )
        }
        hw: dict[tuple[str, int], int] = {}
        for topic, partition, log in self._logs():
            key = [topic, str(partition)]
            hw[(topic, partition)] = log.high_watermark
            families["log_end_offset"].add_metric(key, log.log_end_offset)
            families["high_watermark"].add_metric(key, log.high_watermark)
            families["log_start_offset"].add_metric(key, log.log_start_offset)
            families["size_bytes"].add_metric(key, log.size_bytes)
        yield from families.values()
        yield self._lag(hw)
        uptime = GaugeMetricFamily("meridian_broker_uptime_seconds", "Seconds since start")
        uptime.add_metric([], time.monotonic() - self._started)
        yield uptime

    def _lag(self, hw: dict[tuple[str, int], int]) -> Metric:
        lag = GaugeMetricFamily(
            "meridian_group_lag",
            "Records between a group's committed offset and the high watermark",
            labels=["group", "topic", "partition"],
        )
        committed = self._committed() if self._committed is not None else {}
        for group, offsets in committed.items():
            for (topic, partition), offset in offsets.items():
                if (topic, partition) in hw:
                    lag.add_metric(
                        [group, topic, str(partition)], max(0, hw[(topic, partition)] - offset)
                    )
        return lag


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.bytes_in = Counter(
            "meridian_broker_bytes_in", "Record bytes appended", ["topic"], registry=self.registry
        )
        self.bytes_out = Counter(
            "meridian_broker_bytes_out", "Record bytes fetched", ["topic"], registry=self.registry
        )
        self.requests = Counter(
            "meridian_broker_requests",
            "Requests by RPC and error code",
            ["rpc", "error"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "meridian_broker_request_seconds",
            "Request latency by RPC",
            ["rpc"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._server: Any = None
        self._started = time.monotonic()

    def watch(self, logs: LogsFn, committed: CommittedFn | None) -> None:
        """Report the gauges of ``logs()`` and the group lag from ``committed()``."""
        self.registry.register(_StateCollector(logs, committed, self._started))

    def observe(self, rpc: str, error: str, seconds: float) -> None:
        self.requests.labels(rpc, error).inc()
        self.latency.labels(rpc).observe(seconds)

    def add_bytes_in(self, topic: str, size: int) -> None:
        self.bytes_in.labels(topic).inc(size)

    def add_bytes_out(self, topic: str, size: int) -> None:
        self.bytes_out.labels(topic).inc(size)

    def serve(self, address: str) -> int:
        """Serve ``/metrics`` on ``host:port`` (port 0 allowed); returns the bound port."""
        host, port = parse_address(address, "metrics_listen")
        self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        return int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
