"""Prometheus metrics of one broker, in a registry of its own (several brokers may share
a process in tests), served over HTTP by ``serve``.

Counters and histograms (updated on the request path):

- ``meridian_broker_bytes_in_total{topic}`` / ``meridian_broker_bytes_out_total{topic}``:
  record bytes appended / returned by fetches;
- ``meridian_broker_requests_total{rpc,error}``: requests by RPC and ``ErrorCode`` name
  (``NONE`` for success);
- ``meridian_broker_request_seconds{rpc}``: latency histograms;
- ``meridian_broker_lane_produce_refusals_total{error}``: produces to lane topics refused
  (``LANE_TOPIC_PENDING``, ``LANE_NOT_FOUND``), by code;
- ``meridian_broker_lane_handover_refusals_total``: lane-topic partitions an OffsetFetch
  answered ``HANDOVER_IN_PROGRESS``;
- ``meridian_broker_lane_topic_demands``: lane topics asked for and not yet created (a
  gauge read at scrape time).

Gauges computed at scrape time from the hosted logs and the group coordinator:

- ``meridian_partition_log_end_offset``, ``meridian_partition_high_watermark``,
  ``meridian_partition_log_start_offset``, ``meridian_partition_size_bytes``
  (``{topic,partition}``);
- ``meridian_group_lag_records{group,topic,partition}``: local high watermark minus
  the group's committed offset, for the groups this broker coordinates and the
  partitions hosted here (``meridian_group_lag``: the same, its earlier name);
- ``meridian_group_lag_seconds{group,topic,partition}``: the age of the record at the
  committed offset — the group's oldest unconsumed record — found through the offset
  index (``lag.record_age``), 0 when caught up. A record's timestamp never changes, so
  each scrape reuses the timestamps the previous one found for unchanged offsets.
  Both also cover the coordinated groups' partitions other brokers host, from their
  leaders' last answers (``group_lag.RemoteLags``, asked at a bounded interval);
- ``meridian_broker_uptime_seconds``.

The Kafka listener (``dataplane.broker.kafka``; its requests also count above under the
gRPC RPC each runs as): ``meridian_kafka_connections`` (open),
``meridian_kafka_request_seconds{api}`` (requests answered by Kafka API, and latency),
``meridian_kafka_connections_closed_total{reason}`` and
``meridian_kafka_authentications_total{mechanism,outcome}``.

Tiered storage (a broker with an object store; ``tiering.TierManager``):

- ``meridian_tier_uploaded_bytes_total``, ``meridian_tier_uploaded_segments_total``,
  ``meridian_tier_expired_segments_total`` (total retention),
  ``meridian_tier_orphans_deleted_total`` (the cleaner and lost commits),
  ``meridian_tier_failures_total`` (store calls that failed; each backs off);
- ``meridian_tier_upload_lag_seconds{topic,partition}``: how long the oldest sealed,
  committed segment not yet uploaded has waited (0: none waits), for the partitions led
  here; ``meridian_partition_remote_bytes`` and ``meridian_partition_remote_log_start_offset``
  beside it;
- ``meridian_tier_remote_fetch_seconds``: latency of reads served from the remote tier;
- ``meridian_tier_cache_hits_total`` / ``_misses_total`` and ``meridian_tier_cache_bytes``:
  the cache of remote chunks (hit rate = hits / (hits + misses)).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from dataplane.broker.config import parse_address
from dataplane.broker.group_lag import LagKey, RemoteLag
from dataplane.broker.lag import NO_RECORD, timestamp_at
from dataplane.records.errors import RecordError
from dataplane.storage.errors import StorageError
from dataplane.storage.log import PartitionLog, wall_clock_ms

if TYPE_CHECKING:
    from dataplane.broker.tiering import TierManager

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
RemoteFn = Callable[[], Mapping[LagKey, RemoteLag]]


class _StateCollector(Collector):
    def __init__(
        self,
        logs: LogsFn,
        committed: CommittedFn | None,
        started: float,
        remote: RemoteFn | None = None,
    ) -> None:
        self._logs = logs
        self._committed = committed
        self._remote = remote
        self._started = started
        self._timestamps: dict[tuple[str, int, int], int] = {}  # (topic, partition, offset)

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
        hosted: dict[tuple[str, int], PartitionLog] = {}
        for topic, partition, log in self._logs():
            key = [topic, str(partition)]
            hosted[(topic, partition)] = log
            families["log_end_offset"].add_metric(key, log.log_end_offset)
            families["high_watermark"].add_metric(key, log.high_watermark)
            families["log_start_offset"].add_metric(key, log.log_start_offset)
            families["size_bytes"].add_metric(key, log.size_bytes)
        yield from families.values()
        yield from self._lags(hosted)
        uptime = GaugeMetricFamily("meridian_broker_uptime_seconds", "Seconds since start")
        uptime.add_metric([], time.monotonic() - self._started)
        yield uptime

    def _lags(self, logs: dict[tuple[str, int], PartitionLog]) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        doc = "Records between a group's committed offset and the high watermark"
        records = GaugeMetricFamily("meridian_group_lag_records", doc, labels=labels)
        alias = GaugeMetricFamily("meridian_group_lag", f"{doc} (as _records)", labels=labels)
        seconds = GaugeMetricFamily(
            "meridian_group_lag_seconds",
            "Age of the group's oldest unconsumed record (0 when caught up)",
            labels=labels,
        )
        committed = self._committed() if self._committed is not None else {}
        now_ms, seen = wall_clock_ms(), dict[tuple[str, int, int], int]()
        for group, offsets in committed.items():
            for tp, offset in offsets.items():
                log = logs.get(tp)
                if log is None:
                    continue
                key = [group, tp[0], str(tp[1])]
                records.add_metric(key, max(0, log.high_watermark - offset))
                alias.add_metric(key, max(0, log.high_watermark - offset))
                seconds.add_metric(key, self._age_ms(log, tp, offset, now_ms, seen) / 1000)
        self._timestamps = seen  # only the offsets still committed stay cached
        now = time.monotonic()
        remote = self._remote() if self._remote is not None else {}
        for (group, topic, partition), lag in remote.items():
            if (topic, partition) not in logs:
                key = [group, topic, str(partition)]
                records.add_metric(key, lag.records)
                alias.add_metric(key, lag.records)
                seconds.add_metric(key, lag.age_ms_now(now) / 1000)
        yield from (records, alias, seconds)

    def _age_ms(
        self,
        log: PartitionLog,
        tp: tuple[str, int],
        offset: int,
        now_ms: int,
        seen: dict[tuple[str, int, int], int],
    ) -> int:
        """The age of the record at ``offset`` (0 when caught up); a found timestamp is
        cached by offset, a failed read counts as caught up until a later scrape."""
        if offset >= log.high_watermark:
            return 0
        key = (*tp, max(offset, log.log_start_offset))
        timestamp = self._timestamps.get(key)
        if timestamp is None:
            try:
                timestamp = timestamp_at(log, key[2])
            except (StorageError, RecordError, OSError):  # a scrape reports the rest
                return 0
        if timestamp == NO_RECORD:
            return 0
        seen[key] = timestamp
        return max(0, now_ms - timestamp)


class _TierCollector(Collector):
    def __init__(self, tier: TierManager) -> None:
        self.tier = tier

    def collect(self) -> Iterator[Metric]:
        counters = self.tier.counters
        for name, help_text, value in (
            ("uploaded_bytes", "Bytes of segments uploaded", counters.bytes_uploaded),
            ("uploaded_segments", "Segments uploaded", counters.segments_uploaded),
            (
                "expired_segments",
                "Remote segments total retention deleted",
                counters.segments_deleted,
            ),
            ("orphans_deleted", "Unlisted remote objects deleted", counters.orphans_deleted),
            ("failures", "Object-store calls that failed", counters.failures),
        ):
            yield CounterMetricFamily(f"meridian_tier_{name}", help_text, value=value)
        stats = self.tier.reader.stats()
        yield CounterMetricFamily(
            "meridian_tier_cache_hits", "Remote chunks read from the cache", value=stats.hits
        )
        yield CounterMetricFamily(
            "meridian_tier_cache_misses", "Remote chunks fetched from the store", value=stats.misses
        )
        yield GaugeMetricFamily(
            "meridian_tier_cache_bytes",
            "Bytes in the cache of remote chunks",
            value=stats.size_bytes,
        )
        labels = ["topic", "partition"]
        lag = GaugeMetricFamily(
            "meridian_tier_upload_lag_seconds",
            "Age of the oldest sealed segment waiting for upload",
            labels=labels,
        )
        size = GaugeMetricFamily(
            "meridian_partition_remote_bytes", "Bytes in the remote tier", labels=labels
        )
        start = GaugeMetricFamily(
            "meridian_partition_remote_log_start_offset",
            "The first offset kept in the remote tier (-1: none)",
            labels=labels,
        )
        for (topic, index), described in self.tier.partitions().items():
            key = [topic, str(index)]
            start.add_metric(key, described.log_start_offset)
            size.add_metric(key, described.size_bytes)
            lag.add_metric(key, described.upload_lag_ms / 1000)
        yield from (lag, size, start)


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
        self.lane_refusals = Counter(
            "meridian_broker_lane_produce_refusals",
            "Produces to lane topics refused, by error code",
            ["error"],
            registry=self.registry,
        )
        self.handover_refusals = Counter(
            "meridian_broker_lane_handover_refusals",
            "Lane partitions an OffsetFetch refused while another group of the family held them",
            registry=self.registry,
        )
        self.lane_demands = Gauge(
            "meridian_broker_lane_topic_demands",
            "Lane topics asked for and not created yet",
            registry=self.registry,
        )
        self.remote_fetch = Histogram(
            "meridian_tier_remote_fetch_seconds",
            "Latency of reads served from the remote tier",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.kafka_connections = Gauge(
            "meridian_kafka_connections",
            "Open connections of the Kafka listener",
            registry=self.registry,
        )
        self.kafka_requests = Histogram(
            "meridian_kafka_request_seconds",
            "Kafka protocol requests answered, by Kafka API, and their latency",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.kafka_closed = Counter(
            "meridian_kafka_connections_closed",
            "Kafka connections the broker closed, by reason (malformed: a frame that does not "
            "decode or is too large; refused: an unsupported API, a request before "
            "authentication, a failed authentication, credentials that no longer hold)",
            ["reason"],
            registry=self.registry,
        )
        self.kafka_authentications = Counter(
            "meridian_kafka_authentications",
            "SASL authentications on the Kafka listener, by mechanism and outcome",
            ["mechanism", "outcome"],
            registry=self.registry,
        )
        self._server: Any = None
        self._started = time.monotonic()

    def watch(
        self, logs: LogsFn, committed: CommittedFn | None, remote: RemoteFn | None = None
    ) -> None:
        """Report the gauges of ``logs()`` and the group lag from ``committed()`` (and,
        for partitions hosted elsewhere, ``remote()``: the leaders' last answers)."""
        self.registry.register(_StateCollector(logs, committed, self._started, remote))

    def watch_tier(self, tier: TierManager) -> None:
        self.registry.register(_TierCollector(tier))

    def observe_kafka(self, api: str, seconds: float) -> None:
        self.kafka_requests.labels(api).observe(seconds)

    def kafka_refused(self, reason: str) -> None:
        self.kafka_closed.labels(reason).inc()

    def kafka_authenticated(self, mechanism: str, outcome: str) -> None:
        self.kafka_authentications.labels(mechanism, outcome).inc()

    def observe_remote_read(self, seconds: float) -> None:
        self.remote_fetch.observe(seconds)

    def observe(self, rpc: str, error: str, seconds: float) -> None:
        self.requests.labels(rpc, error).inc()
        self.latency.labels(rpc).observe(seconds)

    def watch_lane_demands(self, pending: Callable[[], int]) -> None:
        self.lane_demands.set_function(pending)

    def lane_refused(self, error: str) -> None:
        self.lane_refusals.labels(error).inc()

    def handover_refused(self) -> None:
        self.handover_refusals.inc()

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
