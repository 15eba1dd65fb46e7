"""The broker's side of tiered storage: uploads, retention and reads below the local log.

A ``TierManager`` runs when the broker has an object store (``remote_store_uri``). Every
``tier_interval_ms`` it tends each hosted partition whose topic has ``remote_storage``,
on its own thread (uploads never occupy the I/O pool that serves produce and fetch):

- **Only the leader writes.** It reads the partition's latest manifest when it becomes
  leader (and again whenever a commit loses a race), then uploads, one at a time and in
  offset order, the sealed segments wholly below the high watermark that end past the
  manifest (``upload.next_to_upload``), committing one manifest version per segment. A
  segment that starts below the manifest's end (a former leader cut its segments at other
  offsets) serves only from the manifest's end, so each offset has one remote copy. A
  commit that loses to another writer deletes its own just-uploaded objects and re-reads.
- **Local retention** (``PartitionLog``) deletes only below ``remote_end_offset``, which
  the leader sets from its manifest after each commit. Followers delete nothing on their
  own: they follow the leader's log start, as replication always did.
- **Total retention**: the leader drops the leading remote segments past
  ``retention_ms`` / beyond ``retention_bytes`` (remote plus what is only local) in a new
  manifest version, then deletes their objects, and moves the local log start up to the
  remote one. A crash between the two leaves orphans; so does an upload whose commit
  never happened. The **cleaner** (every ``clean_interval_s``: half the grace, at most a
  minute) deletes the objects of the
  partition's folder that the latest manifest does not list and that are older than
  ``orphan_grace_s``, and prunes old manifest versions; each removal is counted.
- **Failures** (store unreachable, a damaged manifest): the partition backs off
  (doubling up to ``MAX_BACKOFF_S``); produce and local reads go on; local retention
  waits, so disk use grows, and ``upload_lag_ms`` (the age of the oldest sealed segment
  still waiting) says so in DescribeState and the metrics.

Reads: ``remote_view(part)`` is the manifest a fetch below the local log start is served
from (``RemoteLogReader``), and ``log_start_offset(part)`` the first offset kept at all.
A leader that has not read its manifest yet answers such reads with the retriable
``REMOTE_STORAGE_NOT_AVAILABLE`` rather than an out-of-range error that would send a
consumer to the local log start past the remote records.

Thread safety: tending runs on the manager's one thread; the event loop reads
``_states`` entries, which are replaced whole.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

from dataplane.broker.partitions import Partition, PartitionRegistry
from dataplane.broker.producers import ProducerStateTable
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.errors import OffsetOutOfRangeError
from dataplane.storage.log import PartitionLog, wall_clock_ms
from dataplane.storage.segment import LogSegment
from dataplane.tiered import layout, manifests
from dataplane.tiered.errors import RemoteSegmentMissingError
from dataplane.tiered.layout import Manifest, ManifestError, RemoteSegment
from dataplane.tiered.remote_log import RemoteLogReader
from dataplane.tiered.store import ObjectStore, RemoteStoreError
from dataplane.tiered.upload import SegmentGoneError, epochs_json, next_to_upload, upload_segment

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 30.0
READ_WAIT_S = 1.0  # how long a fetch waits for a free remote reader


@dataclass
class TierCounters:
    """Totals since start, for the metrics."""

    bytes_uploaded: int = 0
    segments_uploaded: int = 0
    segments_deleted: int = 0  # by total retention
    orphans_deleted: int = 0  # by the cleaner, or a lost commit
    manifests_pruned: int = 0
    failures: int = 0
    lost_commits: int = 0


@dataclass
class _PartitionTier:
    log: PartitionLog  # the log this state is for (a topic made again has a new one)
    manifest: Manifest | None = None  # None: not read since this broker became leader
    epoch: int = -2  # the leader epoch the manifest was read under
    failures: int = 0
    retry_at: float = 0.0
    next_clean_at: float = 0.0
    waiting_since: dict[int, float] = field(default_factory=dict)  # base offset -> first seen
    upload_lag_ms: int = 0
    last_error: str = ""


class TierManager:
    """See the module docstring."""

    def __init__(
        self,
        registry: PartitionRegistry,
        store: ObjectStore,
        *,
        broker_id: int,
        interval_ms: int,
        orphan_grace_s: float = 300.0,
        cache_bytes: int = 256 * 1024 * 1024,
        remote_readers: int = 4,
    ) -> None:
        self.registry = registry
        self.store = store
        self.broker_id = broker_id
        self.interval_s = interval_ms / 1000
        # Listing a partition's objects costs a call per thousand: once per grace period
        # (at most ten minutes apart), and at once after a failed or lost upload.
        self.clean_interval_s = max(self.interval_s, min(600.0, orphan_grace_s))
        self.orphan_grace_s = orphan_grace_s
        self.counters = TierCounters()
        self.reader = RemoteLogReader(store, cache_bytes)
        self.on_remote_read: Callable[[float], None] | None = None  # seconds per read
        self._readers = threading.BoundedSemaphore(remote_readers)
        self._states: dict[tuple[str, int], _PartitionTier] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="broker-tier")
        self._stopping = threading.Event()
        self.exclusive_create_checked = False

    # -- running -----------------------------------------------------------------------
    async def run_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            try:
                await loop.run_in_executor(self._pool, self.tick)
            except RuntimeError:
                return  # the pool is shut down: the broker is stopping
            except Exception:  # the loop outlives any one failure
                log.exception("tiered storage: a round failed")
            await asyncio.sleep(self.interval_s)

    def stop(self) -> None:
        self._stopping.set()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def tick(self) -> None:
        """Tend every tiered partition once (blocking; see the module docstring): first
        read the manifests new leaders need (cheap, and reads wait for them), then give
        each partition up to ``_upload_budget_s`` of uploads, in turn."""
        if not self.exclusive_create_checked:
            self._check_exclusive_create()
        parts = [p for p in self.registry.all() if not p.deleted and p.log.config.remote_storage]
        for key in set(self._states) - {(p.topic, p.index) for p in parts}:
            del self._states[key]
        for upload in (False, True):
            for part in parts:
                if self._stopping.is_set():
                    return
                self._tend(part, upload=upload)

    def _check_exclusive_create(self) -> None:
        """Creating one key twice must fail the second time, or two leaders could both
        commit a manifest version: say so loudly (once the store answers)."""
        key = f"_meridian/exclusive-create-check/{self.broker_id}-{time.time_ns()}"
        try:
            first, second = self.store.create(key, b"1"), self.store.create(key, b"2")
            self.store.delete([key])
        except RemoteStoreError:
            return  # asked again next round
        self.exclusive_create_checked = True
        if first and second:
            log.error(
                "the object store %s does not refuse a second create of one key: "
                "manifest commits cannot fence a former leader",
                self.store.uri,
            )

    def _state(self, part: Partition) -> _PartitionTier:
        key = (part.topic, part.index)
        state = self._states.get(key)
        if state is None or state.log is not part.log:  # new, or the topic made again
            state = self._states[key] = _PartitionTier(part.log)
        return state

    def _tend(self, part: Partition, *, upload: bool) -> None:
        state = self._state(part)
        epoch = _leader_epoch(part)
        if epoch is None:
            if state.epoch != -2:
                part.log.remote_end_offset = None  # a follower follows the leader's start
            state.manifest, state.epoch, state.waiting_since = None, -2, {}
            return
        now = time.monotonic()
        if now < state.retry_at or (upload and state.manifest is None):
            return
        try:
            if state.manifest is None or state.epoch != epoch:
                state.manifest, state.epoch = self._read_manifest(part), epoch
                state.next_clean_at = now  # a new leader looks for orphans first
            if not upload:
                return
            self._upload(part, state, epoch, deadline=now + self._upload_budget_s)
            self._expire(part, state, epoch)
            self._publish(part, state)
            if now >= state.next_clean_at:
                self._clean(part, state)
                state.next_clean_at = now + self.clean_interval_s
            state.failures, state.last_error = 0, ""
        except Exception as exc:  # one partition's failure must not stop the others
            self._failed(part, state, exc, now)
        finally:
            self._measure_lag(part, state)

    @property
    def _upload_budget_s(self) -> float:
        return max(self.interval_s, 1.0)

    def _failed(self, part: Partition, state: _PartitionTier, exc: Exception, now: float) -> None:
        if not isinstance(exc, (RemoteStoreError, ManifestError, UnknownRemoteStateError)):
            log.exception("%s-%s: tiered storage failed", part.topic, part.index)
        state.failures += 1
        self.counters.failures += 1
        state.manifest = None  # whatever happened, read the truth again
        state.next_clean_at = now  # a failed upload may have left objects behind
        backoff = self.interval_s * 2 ** min(state.failures, 10)
        state.retry_at = now + min(MAX_BACKOFF_S, backoff)
        if state.last_error != str(exc):
            log.warning("%s-%s: tiered storage: %s", part.topic, part.index, exc)
        state.last_error = str(exc)

    # -- uploads -----------------------------------------------------------------------
    def _read_manifest(self, part: Partition) -> Manifest:
        config = part.log.config
        manifest = manifests.latest(self.store, part.topic, config.topic_id, part.index)
        if manifest.end_offset > part.log.log_end_offset:
            # The store holds offsets this log never had: another incarnation's objects,
            # or a log that lost its tail. Nothing may be deleted or served on its word.
            raise UnknownRemoteStateError(
                f"the remote manifest ends at {manifest.end_offset}, past this log's end "
                f"{part.log.log_end_offset}"
            )
        return manifest

    def _upload(
        self, part: Partition, state: _PartitionTier, epoch: int, *, deadline: float
    ) -> None:
        log_ = part.log
        assert state.manifest is not None
        # Below the last stable offset: every transaction of an uploaded segment has
        # ended, so its aborted ones can be listed with it (``_sidecars``).
        stable = part.last_stable_offset()
        for segment in next_to_upload(state.manifest, log_.segments, stable):
            if self._stopping.is_set() or _leader_epoch(part) != epoch:
                return
            if time.monotonic() > deadline:
                return  # the other partitions' turn; this one goes on next round
            manifest = state.manifest
            start = max(segment.base_offset, manifest.end_offset, log_.log_start_offset)
            if start >= segment.next_offset:
                continue
            try:
                remote = upload_segment(
                    self.store,
                    part.topic,
                    log_.config.topic_id,
                    part.index,
                    segment,
                    start_offset=start,
                    sidecars=self._sidecars(part, segment, start),
                    now_ms=wall_clock_ms(),
                )
            except (SegmentGoneError, FileNotFoundError):
                return  # retention or a truncation took it: plan again next time
            if not self._commit(part, state, [*manifest.segments, remote], epoch, remote):
                return
            self.counters.bytes_uploaded += remote.size_bytes
            self.counters.segments_uploaded += 1
            state.waiting_since.pop(segment.base_offset, None)

    def _sidecars(self, part: Partition, segment: LogSegment, start: int) -> dict[str, bytes]:
        entries = part.replica.epochs.entries if part.replica is not None else []
        producers = ProducerStateTable()
        with segment.pin():
            for header in segment.batch_headers(segment.base_offset, segment.size_bytes):
                producers.replay(header.base_offset, header)
        state = json.loads(producers.to_json(segment.next_offset))
        index = part.producers.aborted
        aborted = index.collect(segment.base_offset, segment.next_offset) if index else []
        state["aborted"] = [[a.producer_id, a.first_offset, a.last_offset] for a in aborted]
        return {
            "epochs": epochs_json(entries, start, segment.next_offset),
            "producers": json.dumps(state).encode(),
        }

    def _commit(
        self,
        part: Partition,
        state: _PartitionTier,
        segments: list[RemoteSegment],
        epoch: int,
        uploaded: RemoteSegment | None,
    ) -> bool:
        """Commit the next manifest version; on a lost race, drop what was uploaded for
        it and re-read the manifest (False)."""
        assert state.manifest is not None
        wanted = state.manifest.next_version(
            segments, broker_id=self.broker_id, leader_epoch=epoch, now_ms=wall_clock_ms()
        )
        if manifests.commit(self.store, wanted):
            state.manifest = wanted
            return True
        # Lost, or did it? A retried create whose first try went through reads as lost.
        latest = self._read_manifest(part)
        state.manifest = latest
        if uploaded is not None and any(s.id == uploaded.id for s in latest.segments):
            return True
        self.counters.lost_commits += 1
        if uploaded is not None:
            self.store.delete(uploaded.keys(part.topic, wanted.topic_id, part.index))
            self.counters.orphans_deleted += len(layout.FILE_KINDS)
        return False

    # -- retention ---------------------------------------------------------------------
    def _expire(self, part: Partition, state: _PartitionTier, epoch: int) -> None:
        manifest = state.manifest
        assert manifest is not None
        doomed = _expired(manifest, part, wall_clock_ms())
        if not doomed:
            return
        if not self._commit(part, state, list(manifest.segments[len(doomed) :]), epoch, None):
            return
        keys = [key for s in doomed for key in s.keys(part.topic, manifest.topic_id, part.index)]
        self.store.delete(keys)
        self.counters.segments_deleted += len(doomed)

    def _publish(self, part: Partition, state: _PartitionTier) -> None:
        """Tell the local log what is uploaded, move its start up to the remote one, and
        apply its local retention."""
        manifest = state.manifest
        assert manifest is not None
        log_ = part.log
        log_.remote_end_offset = manifest.end_offset
        if manifest.version and log_.log_start_offset < manifest.log_start_offset:
            log_.advance_log_start_offset(manifest.log_start_offset)
        # Local retention at the pace of uploads (the log manager's own pass is slower);
        # followers follow the log start this moves.
        log_.delete_retained_segments()

    def _clean(self, part: Partition, state: _PartitionTier) -> None:
        manifest = state.manifest
        assert manifest is not None
        listed = {
            key
            for s in manifest.segments
            for key in s.keys(part.topic, manifest.topic_id, part.index)
        }
        cutoff = time.time() - self.orphan_grace_s
        found = manifests.segment_objects(self.store, part.topic, manifest.topic_id, part.index)
        orphans = [  # an object of unknown age is taken for a new one
            o.key for o in found if o.key not in listed and 0 < o.modified_s < cutoff
        ]
        if orphans:
            # Re-read first: a commit by another writer since ours may list them.
            latest = self._read_manifest(part)
            listed |= {
                key
                for s in latest.segments
                for key in s.keys(part.topic, latest.topic_id, part.index)
            }
            orphans = [key for key in orphans if key not in listed]
            self.store.delete(orphans)
            self.counters.orphans_deleted += len(orphans)
            if orphans:
                log.info("%s-%s: deleted %d orphaned objects", part.topic, part.index, len(orphans))
        if manifest.version:
            self.counters.manifests_pruned += manifests.prune(
                self.store, manifest, leftovers_before_s=cutoff
            )

    def _measure_lag(self, part: Partition, state: _PartitionTier) -> None:
        """How long the oldest sealed, committed segment not yet uploaded has waited
        (also while the manifest cannot be read: then against what was last confirmed)."""
        if _leader_epoch(part) is None:
            state.upload_lag_ms = 0
            return
        manifest = state.manifest
        if manifest is None:
            confirmed = part.log.remote_end_offset or 0
            manifest = Manifest(part.topic, part.index, "", end_offset=confirmed)
        now = time.monotonic()
        waiting = next_to_upload(manifest, part.log.segments, part.log.high_watermark)
        state.waiting_since = {
            s.base_offset: state.waiting_since.get(s.base_offset, now) for s in waiting
        }
        oldest = min(state.waiting_since.values(), default=now)
        state.upload_lag_ms = int((now - oldest) * 1000)

    # -- what readers and describe see ---------------------------------------------------
    def remote_view(self, part: Partition) -> Manifest | None:
        """The manifest reads below the local log are served from (None: not read yet)."""
        state = self._states.get((part.topic, part.index))
        return None if state is None else state.manifest

    def log_start_offset(self, part: Partition) -> int:
        """The first offset kept at all: the remote start, or the local one."""
        manifest = self.remote_view(part)
        local = part.log.log_start_offset
        if manifest is None or manifest.is_empty:
            return local
        return min(local, manifest.log_start_offset)

    def require_view(self, part: Partition) -> Manifest | None:
        """The manifest, when the remote tier may hold records below the local log;
        ``REMOTE_STORAGE_NOT_AVAILABLE`` while it is not read yet (None: a log starting
        at 0 has nothing below it)."""
        manifest = self.remote_view(part)
        if manifest is None and part.log.log_start_offset > 0:
            raise MeridianError(
                ErrorCode.REMOTE_STORAGE_NOT_AVAILABLE,
                f"{part.topic}-{part.index}: the remote manifest is not read yet",
            )
        return manifest

    def check_readable(self, part: Partition, offset: int) -> Manifest | None:
        """The manifest to serve ``offset`` from (below the local log start), None to read
        locally; ``REMOTE_STORAGE_NOT_AVAILABLE`` while the manifest is unknown."""
        if not part.log.config.remote_storage or offset >= part.log.log_start_offset:
            return None
        manifest = self.require_view(part)
        if manifest is None or manifest.is_empty or offset < manifest.log_start_offset:
            return None  # below everything kept: the local read answers out of range
        return manifest

    def aborted(self, manifest: Manifest, offset: int) -> list[tuple[int, int, int]]:
        """The aborted transactions with a record in the remote segment serving
        ``offset``: (producer id, first offset, last offset) (blocking)."""
        return self.reader.aborted(manifest, offset)

    def read(self, part: Partition, manifest: Manifest, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the remote segment serving ``offset`` (blocking). At most
        ``remote_readers`` run at once, so a slow store holds few of the I/O threads that
        produce and local reads need; the others answer ``REMOTE_STORAGE_NOT_AVAILABLE``
        (retriable) after ``READ_WAIT_S``."""
        if not self._readers.acquire(timeout=READ_WAIT_S):
            raise MeridianError(
                ErrorCode.REMOTE_STORAGE_NOT_AVAILABLE,
                f"{part.topic}-{part.index}: every remote reader is busy",
            )
        started = time.monotonic()
        try:
            return self.reader.read(manifest, offset, max_bytes).data
        except RemoteSegmentMissingError:
            current = self.remote_view(part)
            if current is not None and offset < current.log_start_offset:
                # Total retention removed it since the read began: out of range now.
                raise OffsetOutOfRangeError(
                    offset, current.log_start_offset, part.log.log_end_offset
                ) from None
            raise
        finally:
            self._readers.release()
            if self.on_remote_read is not None:
                self.on_remote_read(time.monotonic() - started)

    def offset_for_timestamp(self, manifest: Manifest, timestamp: int) -> int | None:
        return self.reader.offset_for_timestamp(manifest, timestamp)

    def describe(self, part: Partition) -> RemoteState:
        """The partition's remote tier as this broker knows it."""
        state = self._states.get((part.topic, part.index))
        if state is None:
            return RemoteState()
        manifest = state.manifest
        if manifest is None:
            return RemoteState(
                end_offset=part.log.remote_end_offset or 0, upload_lag_ms=state.upload_lag_ms
            )
        local_start = part.log.log_start_offset
        return RemoteState(
            log_start_offset=manifest.log_start_offset if not manifest.is_empty else -1,
            end_offset=manifest.end_offset,
            size_bytes=manifest.size_bytes,
            segments=len(manifest.segments),
            upload_lag_ms=state.upload_lag_ms,
            only_bytes=sum(s.size_bytes for s in manifest.segments if s.end_offset <= local_start),
        )

    def partitions(self) -> dict[tuple[str, int], RemoteState]:
        """``describe`` of every tiered partition this broker leads, for the metrics."""
        found = {}
        for (topic, index), state in list(self._states.items()):
            part = self.registry.get(topic, index)
            if part is not None and state.epoch != -2:
                found[(topic, index)] = self.describe(part)
        return found


class RemoteState(NamedTuple):
    """What ``TierManager.describe`` tells of a partition's remote tier."""

    log_start_offset: int = -1  # the first remote offset kept (-1: none)
    end_offset: int = 0  # one past the last uploaded offset
    size_bytes: int = 0  # of the remote segments
    segments: int = 0
    upload_lag_ms: int = 0  # age of the oldest sealed segment waiting (0: none)
    only_bytes: int = 0  # of the remote segments wholly below the local log start


class UnknownRemoteStateError(Exception):
    """The store's manifest does not fit the local log (see ``_read_manifest``)."""


def _leader_epoch(part: Partition) -> int | None:
    """The leader epoch this broker leads ``part`` at (-1: unreplicated), or None."""
    state = part.replica
    if state is None:
        return -1
    return state.leader_epoch if state.is_leader else None


def _expired(manifest: Manifest, part: Partition, now_ms: int) -> list[RemoteSegment]:
    """The leading remote segments total retention removes."""
    config = part.log.config
    doomed: list[RemoteSegment] = []
    if config.retention_ms >= 0:
        for segment in manifest.segments:
            if segment.max_timestamp < 0 or segment.max_timestamp >= now_ms - config.retention_ms:
                break
            doomed.append(segment)
    if doomed or config.retention_bytes < 0:
        return doomed
    local_only = sum(s.size_bytes for s in part.log.segments if s.next_offset > manifest.end_offset)
    excess = manifest.size_bytes + local_only - config.retention_bytes
    for segment in manifest.segments:
        if excess < segment.size_bytes:
            break
        doomed.append(segment)
        excess -= segment.size_bytes
    return doomed
