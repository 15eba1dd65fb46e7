"""Prometheus metrics of transactions and half messages, in the broker's registry.

Counters (updated as things happen):

- ``meridian_txn_completed_total{kind,outcome}``: transactions (``kind="transaction"``)
  and half messages (``"half"``) completed here as coordinator, by outcome (``commit``,
  ``abort``);
- ``meridian_txn_fenced_total{reason}``: open transactions aborted with a bumped epoch,
  fencing their producer: ``init`` (a new producer of the transactional id),
  ``timeout`` (open past ``transaction_timeout_ms``: the timed-out aborts), ``operator``;
- ``meridian_txn_markers_written_total{outcome}``: markers this broker appended as a
  partition's leader (or a ``__consumer_offsets`` partition's coordinator);
- ``meridian_txn_markers_fenced_total{code}``: markers this coordinator sent that a
  partition refused as fenced (``INVALID_PRODUCER_EPOCH``,
  ``TRANSACTION_COORDINATOR_FENCED``), so never written: expected only when a newer
  epoch got there first; otherwise worth an alert;
- ``meridian_half_checks_total{outcome}``: check-backs of half messages: ``commit``,
  ``rollback``, ``unknown`` (answered so, or the callback raised: ``error``),
  ``no_producer`` (no producer of the group was connected);
- ``meridian_half_resolved_total{outcome,by}``: half messages decided, by whom
  (``producer``, ``check-back``, ``default``, ``operator``).

Gauges read at scrape time:

- ``meridian_txn_open{kind,state}``: the transactions and half messages this broker
  coordinates, by state (``ongoing``, ``prepare_commit``, ...);
- ``meridian_partition_last_stable_offset_lag{topic,partition}``: high watermark minus
  last stable offset of each partition led here (what read_committed readers wait for);
- ``meridian_txn_marker_oldest_pending_seconds``: how long the oldest decided transaction
  of this coordinator has been waiting for its markers (0: none); a partition without a
  leader keeps it growing until the partition is back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from dataplane.broker.txn.state import TxnMetadata

OpenCounts = Callable[[], dict[tuple[str, str], int]]
StableLags = Callable[[], Iterable[tuple[str, int, int]]]  # topic, partition, HW - LSO


class TxnMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._completed = Counter(
            "meridian_txn_completed",
            "Transactions and half messages completed by this coordinator",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self._fenced = Counter(
            "meridian_txn_fenced",
            "Open transactions aborted with a bumped epoch, by reason",
            ["reason"],
            registry=self.registry,
        )
        self._markers = Counter(
            "meridian_txn_markers_written",
            "Transaction markers appended by this broker",
            ["outcome"],
            registry=self.registry,
        )
        self._markers_fenced = Counter(
            "meridian_txn_markers_fenced",
            "Markers sent by this coordinator that a partition refused as fenced",
            ["code"],
            registry=self.registry,
        )
        self._checks = Counter(
            "meridian_half_checks",
            "Check-backs of half messages, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self._resolved = Counter(
            "meridian_half_resolved",
            "Half messages decided, by outcome and by whom",
            ["outcome", "by"],
            registry=self.registry,
        )
        self._collector: _Gauges | None = None

    def completed(self, meta: TxnMetadata, commit: bool) -> None:
        kind = "half" if meta.half is not None else "transaction"
        self._completed.labels(kind, "commit" if commit else "abort").inc()

    def fenced(self, reason: str) -> None:
        self._fenced.labels(reason).inc()

    def marker_written(self, commit: bool) -> None:
        self._markers.labels("commit" if commit else "abort").inc()

    def marker_fenced(self, code: str) -> None:
        self._markers_fenced.labels(code).inc()

    def checked(self, outcome: str) -> None:
        self._checks.labels(outcome).inc()

    def resolved(self, commit: bool, by: str) -> None:
        self._resolved.labels("commit" if commit else "rollback", by).inc()

    def watch(
        self,
        open_counts: OpenCounts,
        stable_lags: StableLags,
        oldest_pending_s: Callable[[], float] = lambda: 0.0,
    ) -> None:
        """Report the coordinator's transactions, the partitions' LSO lag and the age of
        the oldest markers pending at scrape."""
        if self._collector is None:
            self._collector = _Gauges(open_counts, stable_lags, oldest_pending_s)
            self.registry.register(self._collector)


class _Gauges(Collector):
    def __init__(
        self,
        open_counts: OpenCounts,
        stable_lags: StableLags,
        oldest_pending_s: Callable[[], float],
    ) -> None:
        self._open_counts = open_counts
        self._stable_lags = stable_lags
        self._oldest_pending_s = oldest_pending_s

    def collect(self) -> Iterator[Metric]:
        opened = GaugeMetricFamily(
            "meridian_txn_open",
            "Transactions and half messages coordinated here, by state",
            labels=["kind", "state"],
        )
        for (kind, state), count in sorted(self._open_counts().items()):
            opened.add_metric([kind, state], count)
        yield opened
        lag = GaugeMetricFamily(
            "meridian_partition_last_stable_offset_lag",
            "High watermark minus last stable offset, per partition led here",
            labels=["topic", "partition"],
        )
        for topic, partition, records in self._stable_lags():
            lag.add_metric([topic, str(partition)], records)
        yield lag
        yield GaugeMetricFamily(
            "meridian_txn_marker_oldest_pending_seconds",
            "Age of the oldest decided transaction still waiting for its markers here",
            value=self._oldest_pending_s(),
        )
