"""Prometheus metrics of one agent, in a registry of its own, served at ``/metrics`` by
the HTTP front end.

Histograms, observed on the write and drain paths:

- ``meridian_databus_write_seconds{stream,delivery}``: an application's write, from
  the request to its answer (``ack_on_broker`` includes the drain);
- ``meridian_databus_batch_records{stream}``: records per batch sent to the brokers;
- ``meridian_databus_send_seconds{stream}``: one round of a chunk's produce requests.

Computed at scrape time from the agent (``AgentCollector``), each ``{stream}``:

- ``meridian_databus_records_in_total`` / ``_bytes_in_total``: accepted from applications;
- ``meridian_databus_records_out_total`` / ``_bytes_out_total``: written to topics
  (bytes as sent, compressed);
- ``meridian_databus_broker_requests_total``: produce rounds sent to the brokers;
- ``meridian_databus_send_errors_total``: failed sends and metadata lookups;
- ``meridian_databus_rejected_records_total``: refused because the spool was full;
- ``meridian_databus_dropped_records_total``: dropped by ``drop_oldest``;
- ``meridian_databus_undeliverable_records_total``: kept in the stream's dead-letter
  file, since no broker will take them (a lane its tenant does not declare);
- ``meridian_databus_throttled_seconds_total``: pauses the brokers asked for (quotas);
- ``meridian_databus_spool_records`` / ``_spool_bytes`` / ``_spool_age_seconds``: what
  the spool holds not yet delivered, and the age of its oldest write;
- ``meridian_databus_config_version`` (no label): the configuration in force.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

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
BATCH_BUCKETS = (1, 2, 5, 10, 50, 100, 500, 1000, 5000, 10000, 50000)

REGISTRY = CollectorRegistry(auto_describe=True)
WRITE_SECONDS = Histogram(
    "meridian_databus_write_seconds",
    "An application's write, request to answer",
    ["stream", "delivery"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
BATCH_RECORDS = Histogram(
    "meridian_databus_batch_records",
    "Records per batch sent to the brokers",
    ["stream"],
    buckets=BATCH_BUCKETS,
    registry=REGISTRY,
)
SEND_SECONDS = Histogram(
    "meridian_databus_send_seconds",
    "One round of a chunk's produce requests",
    ["stream"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)

_COUNTERS = {
    "records_in": "Records accepted from applications",
    "bytes_in": "Record bytes accepted from applications",
    "records_out": "Records written to topics",
    "bytes_out": "Batch bytes written to topics, as sent",
    "broker_requests": "Produce rounds sent to the brokers",
    "send_errors": "Failed sends and metadata lookups",
    "rejected_records": "Records refused because the spool was full",
    "dropped_records": "Records dropped by drop_oldest",
    "undeliverable_records": "Records kept in the dead-letter file (an undeclared lane)",
    "throttled_seconds": "Time the drain paused because the brokers throttled it (quotas)",
}
_GAUGES = {  # metric name: (the snapshot's key, help)
    "spool_records": ("spool_records", "Records spooled and not yet delivered"),
    "spool_bytes": ("spool_bytes", "Bytes spooled and not yet delivered"),
    "spool_age_seconds": ("spool_age_s", "Age of the oldest write not yet delivered"),
}


class AgentCollector(Collector):
    """The per-stream counters and gauges of ``metrics()`` (stream -> name -> value)
    and ``version()``, read at each scrape."""

    def __init__(
        self, metrics: Callable[[], dict[str, dict[str, Any]]], version: Callable[[], int]
    ) -> None:
        self._metrics = metrics
        self._version = version

    def collect(self) -> Iterator[Metric]:
        values = self._metrics()
        for name, text in _COUNTERS.items():
            family = CounterMetricFamily(f"meridian_databus_{name}", text, labels=["stream"])
            for stream, stats in values.items():
                family.add_metric([stream], stats[name])
            yield family
        for name, (key, text) in _GAUGES.items():
            gauge = GaugeMetricFamily(f"meridian_databus_{name}", text, labels=["stream"])
            for stream, stats in values.items():
                gauge.add_metric([stream], stats[key])
            yield gauge
        version = GaugeMetricFamily("meridian_databus_config_version", "The configuration in force")
        version.add_metric([], self._version())
        yield version
