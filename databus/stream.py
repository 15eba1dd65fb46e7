"""One stream inside the agent: the write path (validate, make room, spool, acknowledge)
and its drain.

A write is all of a request's records, accepted together or not at all. Before anything
is spooled every record is checked: its lane (the write's, or its own ``x-lane``
header) must be a valid lane name, and its size must fit the topic's largest message
(``max_record_bytes``, from the control plane). Then room is made in the spool per the
stream's ``when_full``, the records are appended as one batch of the spool, and the
write is answered: at once with ``ack_on_spool`` (the spool's ``fsync`` mode decides
how durable that is), or once the drain has committed it with ``ack_on_broker``.

``WriteError.kind`` names every refusal; the HTTP and gRPC front ends map kinds to their
statuses in one table each (``KIND_HTTP_STATUS`` here, ``databus.grpc_ingest``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from databus.config import StreamConfig, parse_stream
from databus.drain import Drainer, batch_limit, compression_slack, record_size
from databus.metrics import WRITE_SECONDS
from databus.spool import Spool, SpoolFull, log_config
from databus.upstream import Upstream
from dataplane.errors import ErrorCode, MeridianError
from dataplane.files import replace_file
from dataplane.records.layout import HEADER_SIZE
from lanes.names import (
    InvalidLaneNameError,
    check_lane_name,
    lane_of_headers,
    lane_topic,
    with_lane_header,
)

Header = tuple[str, bytes | None]
ACK_ON_BROKER_TIMEOUT_S = 30.0
SETTINGS_FILE = "stream.json"
# Timestamps a batch can carry as deltas from another record's (int64 both ways).
MAX_TIMESTAMP_MS = 2**62

KIND_HTTP_STATUS = {
    "invalid": 400,
    "unauthenticated": 401,
    "unknown_stream": 404,
    "too_large": 413,
    "spool_full": 429,
    "unavailable": 503,
    "timeout": 504,
    "undelivered": 502,
}


class WriteError(Exception):
    """A write refused (nothing of it spooled), or not confirmed in time (``timeout``:
    it is spooled and will be delivered)."""

    def __init__(self, kind: str, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after_s = retry_after_s


@dataclass(slots=True)
class WriteRecord:
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)
    timestamp_ms: int | None = None


@dataclass
class StreamCounters:
    records_in: int = 0
    bytes_in: int = 0
    writes: int = 0
    rejected: int = 0


class Stream:
    """One stream: its spool, its drain and its write path (see the module docstring)."""

    def __init__(
        self,
        config: StreamConfig,
        max_record_bytes: int,
        directory: Path,
        upstream: Upstream,
    ) -> None:
        self.name = config.name
        self.config = config
        self.max_record_bytes = max_record_bytes
        self.accepting = True
        self._gate = threading.Lock()  # orders writes starting against the stream closing
        self._writing = 0  # writes past the gate, not yet answered
        self.counters = StreamCounters()
        self.spool = Spool(directory, self._log_config(config))
        self.lanes = LaneCheck(upstream)
        self._committed = threading.Condition()
        self.drainer = Drainer(
            config.name,
            self.spool,
            upstream,
            lambda: self.config,
            self._on_commit,
            lambda: self.max_record_bytes,
        )
        self.drainer.start()
        self._save_settings()

    @staticmethod
    def _log_config(config: StreamConfig):  # type: ignore[no-untyped-def]
        return log_config(config.fsync, config.fsync_interval_ms, config.spool_max_bytes)

    def reconfigure(self, config: StreamConfig, max_record_bytes: int) -> None:
        """Take a new configuration: the next write and the next chunk use it."""
        self.spool.update_config(self._log_config(config))
        self.config = config
        self.max_record_bytes = max_record_bytes
        with self._gate:
            self.accepting = True
        self._save_settings()

    def retire(self) -> None:
        """No longer configured: refuse writes; the drain goes on with what is spooled
        (the agent closes the stream once ``close_if_drained`` says it may)."""
        with self._gate:
            self.accepting = False

    def close_if_drained(self) -> bool:
        """Close a retired stream with nothing left to deliver and no write under way;
        whether it did."""
        with self._gate:
            if self.accepting or self._writing or not self.drainer.idle:
                return False
            self.accepting = False
        self.close()
        return True

    def _save_settings(self) -> None:
        """The settings the spool was last drained under (``stream.json``), so a restart
        after the stream left the configuration still drains what it holds."""
        settings = {"config": self.config.to_json(), "max_record_bytes": self.max_record_bytes}
        replace_file(
            self.spool.directory / SETTINGS_FILE, json.dumps(settings).encode(), private=True
        )

    @classmethod
    def reopen(cls, name: str, directory: Path, upstream: Upstream) -> Stream | None:
        """A stream no longer configured whose spool still holds records, to drain them
        under its last settings; None if it holds none (or has no settings)."""
        try:
            saved = json.loads((directory / SETTINGS_FILE).read_bytes())
            config = parse_stream(name, saved["config"])
            limit = int(saved["max_record_bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        stream = cls(config, limit, directory, upstream)
        if stream.drainer.idle:
            stream.close()
            return None
        stream.retire()
        return stream

    # -- writing --------------------------------------------------------------------------
    def write(self, records: list[WriteRecord], lane: str | None, now_ms: int | None = None) -> int:
        """Spool a write (see the module docstring); the number of records accepted."""
        with self._gate:
            if not self.accepting:
                raise WriteError("unknown_stream", f"no stream {self.name!r} in the configuration")
            self._writing += 1
        try:
            return self._write(records, lane, now_ms)
        finally:
            with self._gate:
                self._writing -= 1

    def _write(self, records: list[WriteRecord], lane: str | None, now_ms: int | None) -> int:
        started = time.monotonic()
        config = self.config
        if not records:
            raise WriteError("invalid", "a write needs at least one record")
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        rows, size = self._checked(records, lane, config)
        try:
            self.spool.reserve(
                size,
                when_full=config.when_full,
                max_bytes=config.spool_max_bytes,
                timeout_s=config.block_timeout_ms / 1000,
            )
        except SpoolFull as full:
            self.counters.rejected += len(records)
            raise WriteError("spool_full", str(full), retry_after_s=1.0) from None
        first, end = self.spool.append(rows, now)
        self.counters.writes += 1
        self.counters.records_in += len(rows)
        self.counters.bytes_in += size
        if config.delivery == "ack_on_broker":
            self._wait_committed(first, end)
        WRITE_SECONDS.labels(self.name, config.delivery).observe(time.monotonic() - started)
        return len(rows)

    def _checked(
        self, records: list[WriteRecord], lane: str | None, config: StreamConfig
    ) -> tuple[list[tuple[bytes | None, bytes | None, list[Header], int | None]], int]:
        if lane:
            try:
                check_lane_name(lane)
            except InvalidLaneNameError as err:
                raise WriteError("invalid", str(err)) from None
        rows = []
        total = 0
        lanes_seen: set[str] = set()
        for index, record in enumerate(records):
            headers = record.headers
            try:
                own = lane_of_headers(headers)
            except InvalidLaneNameError as err:
                raise WriteError("invalid", f"record {index}: {err}") from None
            if lane and own is None:
                headers = with_lane_header(headers, lane)
            if (own or lane) and (own or lane) not in lanes_seen:
                lanes_seen.add(own or lane)  # type: ignore[arg-type]
                self._check_declared(config.topic, own or lane)  # type: ignore[arg-type]
            key = record.key
            if key is None and config.key_field is not None:
                key = key_from_value(record.value, config.key_field)
            timestamp = record.timestamp_ms
            if timestamp is not None and not 0 <= timestamp < MAX_TIMESTAMP_MS:
                raise WriteError(
                    "invalid", f"record {index}: timestamp_ms {timestamp} out of range"
                )
            drain_lane = config.lane if (own or lane) is None else None
            size = record_size(key, record.value, headers, drain_lane)
            if batch_limit(config.batch_bytes, self.max_record_bytes) < size and (
                size + HEADER_SIZE + compression_slack(size) > self.max_record_bytes
            ):
                raise WriteError(
                    "too_large",
                    f"record {index} takes {size + HEADER_SIZE} bytes in a batch; topic "
                    f"{config.topic} takes batches of at most {self.max_record_bytes}",
                )
            rows.append((key, record.value, headers, record.timestamp_ms))
            total += size
        return rows, total

    def _check_declared(self, topic: str, lane: str) -> None:
        """Refuse a lane the brokers say the tenant does not declare (``invalid``); a lane
        they cannot answer for now passes (the drain settles it, see ``databus.drain``)."""
        if not self.lanes.declared(topic, lane):
            raise WriteError("invalid", f"lane {lane!r} is not declared for topic {topic}")

    def _on_commit(self, offset: int) -> None:
        with self._committed:
            self._committed.notify_all()

    def _wait_committed(self, first: int, end: int) -> None:
        deadline = time.monotonic() + ACK_ON_BROKER_TIMEOUT_S
        with self._committed:
            while self.spool.state.committed < end:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WriteError(
                        "timeout",
                        "spooled, but the brokers did not take it in time; it will be "
                        "delivered (do not write it again)",
                    )
                self._committed.wait(min(left, 0.5))
        if self.spool.was_undelivered(first, end):
            raise WriteError(
                "undelivered",
                "accepted, then dropped to make room (drop_oldest) or kept in the dead-letter "
                "file: not on the topic",
            )

    # -- state ----------------------------------------------------------------------------
    def snapshot(self, now_ms: int) -> dict[str, float | int | str]:
        stats = self.drainer.stats
        return {
            "records_in": self.counters.records_in,
            "records_out": stats.records_out,
            "bytes_in": self.counters.bytes_in,
            "bytes_out": stats.bytes_out,
            "spool_records": self.spool.depth_records(),
            "spool_bytes": self.spool.depth_bytes,
            "spool_age_s": round(self.spool.oldest_age_s(), 3),
            "dropped": self.spool.dropped_records,
            "rejected": self.counters.rejected,
            "rejected_records": self.counters.rejected,
            "dropped_records": self.spool.dropped_records,
            "broker_requests": stats.requests,
            "send_errors": stats.send_errors,
            "undeliverable_records": stats.undeliverable,
            "throttled_seconds": round(stats.throttled_s, 3),
        }

    def close(self, drain_timeout_s: float = 0.0) -> None:
        self.accepting = False
        self.drainer.stop(drain_timeout_s)
        self.spool.close()


class LaneCheck:
    """Whether a lane is declared for a topic, as the brokers answer for its lane topic,
    remembered for ``TTL_S`` (``NOT_FOUND_TTL_S`` for a refusal, so a lane declared a
    moment ago is soon seen)."""

    TTL_S = 30.0
    NOT_FOUND_TTL_S = 2.0
    MAX_REMEMBERED = 1000

    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self._known: dict[tuple[str, str], tuple[bool, float]] = {}
        self._lock = threading.Lock()

    def declared(self, topic: str, lane: str) -> bool:
        now = time.monotonic()
        with self._lock:
            cached = self._known.get((topic, lane))
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            self._upstream.partitions(lane_topic(topic, lane))
            answer = True
        except MeridianError as error:
            answer = error.code != ErrorCode.LANE_NOT_FOUND
        ttl = self.TTL_S if answer else self.NOT_FOUND_TTL_S
        with self._lock:
            if len(self._known) >= self.MAX_REMEMBERED:  # names come from clients
                self._known.clear()
            self._known[(topic, lane)] = (answer, now + ttl)
        return answer


def key_from_value(value: bytes | None, path: str) -> bytes | None:
    """The key taken from field ``path`` of a JSON object value (None if absent): a
    string as its UTF-8 bytes, another JSON value as its compact JSON text."""
    if not value or value[:1] != b"{":
        return None
    try:
        node: object = json.loads(value)
    except (ValueError, RecursionError):
        return None
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if node is None:
        return None
    if isinstance(node, str):
        return node.encode()
    return json.dumps(node, separators=(",", ":")).encode()
