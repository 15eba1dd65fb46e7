"""The copy loop of one worker: every partition of its leg, one consumer, one producer.

A session (``Copier._session``) opens the clients, finds each partition's resume point
(``resume``), seeks the source consumer there and then copies: each fetched batch of
the source (``Consumer.poll_batches``, records not decoded) is handed whole to the
target producer (``Producer.send_copy``: key, value, headers with provenance, the source
timestamp, records from the target region left out, by the SDK's compiled codec with no
Python object per record; partition p of the exact target topic, lane routing off).
The producer is idempotent with ``acks=all`` and retries without a deadline, so a
leader moving on either side neither loses nor repeats a record. A delivery that fails
for good (a record too large for the target, the topic deleted, access refused) ends the
session; the producer runs with ``close_gaps=False``, so no later batch of that partition
lands past the failed records. The producer is closed, and the next session (after the
request timeout, when the failed one wrote) resumes from what the target holds, which is
exact whatever was in flight.

The source offset of a record removed by retention before it was copied is counted in
``records_lost_to_retention`` and reported as the partition's error; the copy goes on
from the log start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from dataplane.client import (
    Admin,
    BufferFull,
    Consumer,
    DeliveryFutures,
    ErrorCode,
    MeridianError,
    PolledBatch,
    Producer,
    Provenance,
    TopicPartition,
)
from mirror.config import Checkpoint, MirrorConfig
from mirror.progress import Call, PartitionProgress, now_ms
from mirror.resume import StoppingError, find_resume, settle

log = logging.getLogger("mirror")

POLL_TIMEOUT_MS = 100
RETRY_BACKOFF_S = (0.5, 1, 2, 5)  # between failed sessions
OFFSETS_INTERVAL_S = 1.0  # how often the ends of both sides are read for the status
OFFSETS_JOIN_S = 1.0
BUFFER_MEMORY = 64 * 1024 * 1024
CLOSE_TIMEOUT_S = 10.0
# The target producer's request timeout: after a failed session that wrote, the next
# resume scan waits this long, so a request of the closed producer that a broker still
# holds is answered (appended or refused) before the scan reads the target.
REQUEST_TIMEOUT_S = 10.0


class Copier:
    """Copies the partitions of ``config`` until ``stop`` is set; see the module
    docstring. Thread-safe reads: ``status()`` and ``progress()``."""

    def __init__(self, config: MirrorConfig) -> None:
        self.config = config
        self.lock = threading.Lock()
        self.partitions: dict[TopicPartition, PartitionProgress] = {}
        self.targets: dict[str, str] = {}
        for mapping in config.topics:
            self.targets[mapping.source] = mapping.target
            for p in mapping.partitions:
                tp = TopicPartition(mapping.source, p)
                progress = PartitionProgress(mapping.source, mapping.target, p)
                checkpoint = config.checkpoints.get((mapping.source, p))
                if checkpoint is not None:
                    progress.lag_from = checkpoint.source_offset + 1
                self.partitions[tp] = progress
        self._credentials = config.token_source()
        self._provenance = Provenance(config.from_region.encode())
        self._failure: MeridianError | None = None
        self._sent = False  # the session's producer was given records

    # -- clients -------------------------------------------------------------------------
    def _client_args(self, side: str) -> dict[str, Any]:
        cluster = self.config.source if side == "source" else self.config.target
        return {
            "client_id": f"mirror-{self.config.link_id}-{side}",
            "credentials": self._credentials,
            "tls": cluster.tls_ca_file,
        }

    def _bootstrap(self, side: str) -> list[str]:
        return (self.config.source if side == "source" else self.config.target).bootstrap

    def _consumer(self, side: str) -> Consumer:
        batch = self.config.batch
        return Consumer(
            self._bootstrap(side),
            group_id=None,
            auto_offset_reset="none",
            enable_auto_commit=False,
            max_poll_records=batch.max_records,
            max_partition_fetch_bytes=batch.max_bytes,
            fetch_max_wait_ms=100,
            **self._client_args(side),
        )

    def _producer(self) -> Producer:
        batch = self.config.batch
        return Producer(
            self._bootstrap("target"),
            acks="all",
            enable_idempotence=True,
            route_lanes=False,
            linger_ms=batch.linger_ms,
            batch_bytes=min(batch.max_bytes, 1024 * 1024),
            max_request_bytes=max(batch.max_bytes, 4 * 1024 * 1024),
            buffer_memory=BUFFER_MEMORY,
            max_block_ms=1000,
            delivery_timeout_ms=2**31 - 1,  # never give up a record: the target may be down
            request_timeout_ms=REQUEST_TIMEOUT_S * 1000,
            close_gaps=False,  # a record that fails for good stops its partition (no skip)
            **self._client_args("target"),
        )

    def _admin(self, side: str) -> Admin:
        return Admin(self._bootstrap(side), request_timeout_ms=5000, **self._client_args(side))

    # -- the loop ------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Copy until ``stop`` is set, starting a new session after a failed one."""
        watcher = threading.Thread(target=self._watch_offsets, args=(stop,), daemon=True)
        watcher.start()
        failures = 0
        while not stop.is_set():
            try:
                self._session(stop)
                failures = 0
            except StoppingError:
                break
            except Exception as error:  # every failure is retried: the target holds the truth
                log.warning("copy session failed: %s", error, exc_info=True)
                self._mark_all("session", f"{type(error).__name__}: {error}")
                wait = RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S) - 1)]
                if self._sent:  # let the closed producer's last requests be answered
                    wait = max(wait, REQUEST_TIMEOUT_S)
                stop.wait(wait)
                failures += 1
        watcher.join(timeout=OFFSETS_JOIN_S)

    def _session(self, stop: threading.Event) -> None:
        self._failure = None
        self._sent = False
        with self.lock:
            for progress in self.partitions.values():
                progress.state = "resuming"
        producer = self._producer()
        source = self._consumer("source")
        try:
            self._resume(source, stop)
            self._clear_all("session")
            while not stop.is_set():
                if self._failure is not None:
                    raise self._failure
                self._copy(source, producer, stop)
            producer.flush(CLOSE_TIMEOUT_S)
        finally:
            source.close()
            # StoppingError: what the flush left in flight is the next worker's to resume.
            producer.close(0 if stop.is_set() else CLOSE_TIMEOUT_S)

    def _resume(self, source: Consumer, stop: threading.Event) -> None:
        """Find every partition's resume point and seek ``source`` there."""
        starts = self._resume_points(stop)
        source.assign(list(self.partitions))
        with self._admin("source") as admin:
            bounds = _bounds(admin, self.partitions)
            for tp, start in starts.items():
                log_start, end = bounds[tp]
                if start is None:
                    start = self._start_position(admin, tp, (log_start, end))
                with self.lock:
                    progress = self.partitions[tp]
                    if start < log_start:
                        self._lost(progress, log_start - start)
                        start = log_start
                    progress.start_at(start)
                source.seek(tp, start)
                log.info("%s/%s: copying from source offset %d", tp.topic, tp.partition, start)

    def _resume_points(self, stop: threading.Event) -> dict[TopicPartition, int | None]:
        out: dict[TopicPartition, int | None] = {}
        reader = self._consumer("target")
        try:
            with self._admin("target") as admin:
                targets = {tp: TopicPartition(self.targets[tp.topic], tp.partition)
                           for tp in self.partitions}  # fmt: skip
                unsettled = settle(admin, targets.values(), stop)
                if unsettled:
                    log.warning("high watermark still behind the log end in %s", unsettled)
                bounds = _bounds(admin, targets.values())
                for tp, target in targets.items():
                    checkpoint = self._checkpoint(tp)
                    found = find_resume(
                        reader, target, self.config.from_region, bounds[target], checkpoint, stop
                    )
                    out[tp] = found.next_source_offset
                    log.info(
                        "%s/%s: target %s holds copies up to source offset %s (scanned %d)",
                        tp.topic, tp.partition, target.topic,
                        None if found.next_source_offset is None else found.next_source_offset - 1,
                        found.scanned,
                    )  # fmt: skip
        finally:
            reader.close()
        return out

    def _checkpoint(self, tp: TopicPartition) -> Checkpoint | None:
        """The newest known copy of ``tp``: this process's last offset-map point (a
        session that failed), else the configuration's."""
        with self.lock:
            points = self.partitions[tp].points
            if points:
                return Checkpoint(*points[-1])
        return self.config.checkpoints.get((tp.topic, tp.partition))

    def _start_position(self, admin: Admin, tp: TopicPartition, bounds: tuple[int, int]) -> int:
        """The link's start position for a partition nothing was copied from yet."""
        log_start, end = bounds
        if self.config.start_position == "earliest":
            return log_start
        if self.config.start_position == "latest":
            return end
        stamp = self.config.start_timestamp_ms or 0
        offset = admin.list_offsets({tp: stamp})[tp][0]
        return end if offset < 0 else offset

    def _copy(self, source: Consumer, producer: Producer, stop: threading.Event) -> None:
        try:
            batches = source.poll_batches(POLL_TIMEOUT_MS)
        except MeridianError as error:
            self._poll_failed(source, error)
            return
        for polled in batches:
            self._send(producer, polled, stop)

    def _send(self, producer: Producer, polled: PolledBatch, stop: threading.Event) -> None:
        """Hand one fetched batch to the producer, copied whole by the SDK's compiled
        codec: provenance added, records from the target region left out."""
        tp, end = polled.tp, polled.next_offset
        progress = self.partitions[tp]
        target = self.targets[tp.topic]
        while True:
            try:
                sent = producer.send_copy(target, polled, tp.partition, self._provenance)
                self._sent = True
                break
            except BufferFull:
                if stop.is_set():
                    raise
        copied = len(sent.futures)
        with self.lock:
            progress.skipped_records += sent.dropped
            progress.sent_next = end
            if not copied:
                if progress.inflight:
                    progress.inflight[-1].end = end
                else:
                    progress.advance(end)
                return
            assert sent.first_timestamp is not None  # records were copied
            call = Call(sent.first_timestamp, sent.last_offset, end, copied, sent.payload_bytes)
            progress.inflight.append(call)
        sent.futures.add_done_callback(self._delivered(progress))

    def _delivered(self, progress: PartitionProgress) -> Callable[[DeliveryFutures], None]:
        interval_ms = self.config.checkpoint_interval_ms

        def done(futures: DeliveryFutures) -> None:
            error = futures.exception(0)
            with self.lock:
                call = progress.inflight.popleft() if progress.inflight else None
                if call is None:
                    return  # a closed session's leftovers
                if error is not None:
                    progress.set_error("delivery", str(error))
                    self._failure = error
                    return
                progress.clear_error("delivery")
                progress.copied_records += call.records
                progress.copied_bytes += call.size_bytes
                progress.advance(call.end)
                at = now_ms()
                if at - progress.last_point_ms >= interval_ms:
                    target_offset = futures[len(futures) - 1].result(0).offset
                    progress.points.append((call.last_source_offset, target_offset))
                    progress.last_point_ms = at

        return done

    def _poll_failed(self, source: Consumer, error: MeridianError) -> None:
        if error.code != ErrorCode.OFFSET_OUT_OF_RANGE:
            log.warning("source fetch failed: %s", error)
            return
        with self._admin("source") as admin:
            bounds = _bounds(admin, self.partitions)
        for tp, (log_start, end) in bounds.items():
            with self.lock:
                progress = self.partitions[tp]
                at = progress.sent_next
                if at < log_start and not progress.inflight:
                    self._lost(progress, log_start - at)
                    progress.start_at(log_start)
                    source.seek(tp, log_start)
                elif at > end:
                    progress.set_error("past_end", _past_end(end, at))

    def _lost(self, progress: PartitionProgress, count: int) -> None:
        progress.records_lost_to_retention += count
        progress.set_error(
            "retention",
            f"{progress.records_lost_to_retention} records were removed by retention in the"
            " source before they were copied",
        )
        log.error("%s/%s: %d records lost to retention", progress.source_topic,
                  progress.partition, count)  # fmt: skip

    # -- the ends of both sides, for the status ------------------------------------------
    def _watch_offsets(self, stop: threading.Event) -> None:
        source = self._admin("source")
        target = self._admin("target")
        targets = {tp: TopicPartition(self.targets[tp.topic], tp.partition)
                   for tp in self.partitions}  # fmt: skip
        try:
            while not stop.wait(OFFSETS_INTERVAL_S):
                self._read_ends(source, target, targets)
        finally:
            source.close()
            target.close()

    def _read_ends(
        self, source: Admin, target: Admin, targets: dict[TopicPartition, TopicPartition]
    ) -> None:
        with self.lock:  # read before the ends: the copy's position is at most the end
            positions = {tp: p.sent_next for tp, p in self.partitions.items()}
        try:
            bounds = _bounds(source, self.partitions)
        except MeridianError as error:
            self._mark_all("source", f"the source is unreachable: {error.message}")
        else:
            with self.lock:
                for tp, (log_start, end) in bounds.items():
                    progress = self.partitions[tp]
                    progress.source_log_start_offset, progress.source_end_offset = log_start, end
                    progress.clear_error("source")
                    if positions[tp] > end:  # the source lost records already copied
                        progress.set_error("past_end", _past_end(end, positions[tp]))
                    else:
                        progress.clear_error("past_end")
                    progress.note_caught_up()
        try:
            ends = target.list_offsets(dict.fromkeys(targets.values(), "latest"))
        except MeridianError as error:
            log.info("target offsets not read: %s", error)
            return
        with self.lock:
            for tp, target_tp in targets.items():
                self.partitions[tp].target_end_offset = ends[target_tp][0]

    def _mark_all(self, kind: str, text: str) -> None:
        with self.lock:
            for progress in self.partitions.values():
                progress.set_error(kind, text)

    def _clear_all(self, kind: str) -> None:
        with self.lock:
            for progress in self.partitions.values():
                progress.clear_error(kind)

    # -- reading -------------------------------------------------------------------------
    def status(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The partitions' status and the offset-map points (see ``docs/mirror.md``)."""
        at = now_ms()
        with self.lock:
            partitions = [p.status(at) for p in self.partitions.values()]
            points = [
                {"topic": p.source_topic, "partition": p.partition,
                 "source_offset": s, "target_offset": t}
                for p in self.partitions.values()
                for s, t in p.points
            ]  # fmt: skip
        return partitions, points


def _past_end(end: int, at: int) -> str:
    return (
        f"the source log ends at {end}, before the copy's position ({at}): the source lost"
        " records that were copied; the copy waits until the source reaches it again"
    )


def _bounds(admin: Admin, tps: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
    """(log start, high watermark) of each partition."""
    wanted = list(tps)
    starts = admin.list_offsets(dict.fromkeys(wanted, "earliest"))
    ends = admin.list_offsets(dict.fromkeys(wanted, "latest"))
    return {tp: (starts[tp][0], ends[tp][0]) for tp in wanted}
