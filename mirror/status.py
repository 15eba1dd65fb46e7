"""The worker's HTTP face: ``GET /status`` (JSON) and ``GET /metrics`` (Prometheus).

``/status``: ``link_id``, ``generation``, ``pid``, ``from_region``, ``to_region``,
``partitions`` (per partition: state ``resuming|copying|error``, offsets, lag in records
and seconds, counters, error and since when) and ``points`` (recent offset-map points,
newest last, at most 100 per partition). The controller scrapes it.

Metrics, computed at scrape time from the copier, labels ``link``, ``topic``,
``partition``, ``source_region``, ``target_region``:
``meridian_mirror_copied_records_total``, ``meridian_mirror_copied_bytes_total``,
``meridian_mirror_skipped_records_total``, ``meridian_mirror_lag_records``,
``meridian_mirror_lag_seconds``, ``meridian_mirror_errors_total``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from mirror.copier import Copier

LABELS = ["link", "topic", "partition", "source_region", "target_region"]
_COUNTERS = (
    ("copied_records", "Records copied to the target and acknowledged"),
    ("copied_bytes", "Key and value bytes copied to the target and acknowledged"),
    ("skipped_records", "Records not copied: they arrived by mirror (x-origin-region)"),
)
_GAUGES = (
    ("lag_records", "Source records not yet copied"),
    ("lag_seconds", "Age of the oldest source record not yet copied"),
)


def status_document(copier: Copier) -> dict[str, Any]:
    config = copier.config
    partitions, points = copier.status()
    return {
        "link_id": config.link_id,
        "link": config.link,
        "generation": config.generation,
        "pid": os.getpid(),
        "from_region": config.from_region,
        "to_region": config.to_region,
        "partitions": partitions,
        "points": points,
    }


class MirrorCollector(Collector):
    def __init__(self, copier: Copier) -> None:
        self.copier = copier

    def collect(self) -> Iterator[Metric]:
        config = self.copier.config
        partitions, _ = self.copier.status()
        families: list[Any] = [
            CounterMetricFamily(f"meridian_mirror_{name}", text, labels=LABELS)
            for name, text in _COUNTERS
        ]
        gauges = [
            GaugeMetricFamily(f"meridian_mirror_{name}", text, labels=LABELS)
            for name, text in _GAUGES
        ]
        errors = CounterMetricFamily(
            "meridian_mirror_errors", "Errors reported for the partition", labels=LABELS
        )
        with self.copier.lock:
            error_counts = {
                (p.source_topic, p.partition): p.errors_total
                for p in self.copier.partitions.values()
            }
        for row in partitions:
            labels = [config.link, row["source_topic"], str(row["partition"]),
                      config.from_region, config.to_region]  # fmt: skip
            for family, (name, _) in zip(families, _COUNTERS, strict=True):
                family.add_metric(labels, row[name])
            for gauge, (name, _) in zip(gauges, _GAUGES, strict=True):
                gauge.add_metric(labels, row[name])
            errors.add_metric(labels, error_counts[row["source_topic"], row["partition"]])
        yield from families
        yield from gauges
        yield errors


class StatusServer(ThreadingHTTPServer):
    """Serves the copier's status on ``address`` in a daemon thread (``start``)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], copier: Copier) -> None:
        super().__init__(address, _Handler)
        self.copier = copier
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(MirrorCollector(copier))

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="status", daemon=True).start()


class _Handler(BaseHTTPRequestHandler):
    server: StatusServer
    timeout = 10  # seconds a client may take to send its request or read the answer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/status":
            body = json.dumps(status_document(self.server.copier)).encode()
            self._answer(200, "application/json", body)
        elif path == "/metrics":
            self._answer(200, CONTENT_TYPE_LATEST, generate_latest(self.server.registry))
        else:
            self._answer(404, "text/plain", b"not found\n")

    def _answer(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # scraped every few seconds: not worth a log line each
