"""The group coordinator of one broker: groups and committed offsets.

Each group belongs to partition ``murmur2(trunk group id) mod num_partitions`` of
``__consumer_offsets``, where the trunk group id of a lane group ``G~L`` is ``G`` (and of
``G``, ``G`` itself: ``lanes.names.trunk_group``), so a trunk group and its lane groups —
a *family* — share one coordinator; the broker leading that partition coordinates the
group. A
request for a group of a partition this coordinator has not loaded gets
``NOT_COORDINATOR`` (``COORDINATOR_LOAD_IN_PROGRESS`` while it is being loaded, and
until ``start`` has finished). A group id has 1 to ``MAX_GROUP_ID_CHARS`` characters,
and one holding ``~`` must be a lane group ``G~L`` (non-empty ``G``, one ``~``, a valid
lane name ``L``); any other is refused with ``INVALID_GROUP_ID`` (``check_group_id``).

Offset commits (``commit_offsets``):

- generation -1 with an empty member id commits outside group membership (consumers
  that assign partitions themselves); it is allowed only while the group has no member
  (``UNKNOWN_MEMBER_ID`` otherwise);
- any other commit must come from a current member with the current generation
  (``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``), and not while the group waits for its
  leader's assignment (``REBALANCE_IN_PROGRESS``); commits during the preparation of a
  rebalance are allowed, as cooperative consumers commit what they are giving up;
- each partition is checked (topic name, partition >= 0, offset >= 0, metadata at most
  ``max_metadata_bytes``) and fails alone; the rest are appended as one write to the
  group's offsets partition, synced, before the answer.

Transactional offset commits (``txn_offset_commit``, KIP-447): checked as a member's
commit (generation and member id, so a zombie of an older generation is fenced), then
per producer: an epoch below that of the producer's pending commits is
``PRODUCER_FENCED``; the first commit of a transaction asks the transaction coordinator
(``verify``) that this ``__consumer_offsets`` partition is in the producer's open
transaction (``AddOffsetsToTxn``), else ``INVALID_TXN_STATE``. The answer is remembered
for that transactional id, producer id and epoch until the producer's next marker here
(``complete_txn``), which every later transaction's first commit verifies again; a
marker arriving while the coordinator answers refuses the commit
(``INVALID_TXN_STATE``), so no offsets of an ended transaction stay pending to join the
next one, and another transactional id never joins a producer's pending commits
unverified. The offsets are pending
until ``complete_txn`` (the transaction's marker) applies or drops them; meanwhile a
fetch with ``require_stable`` answers their partitions ``UNSTABLE_OFFSET_COMMIT``.

Offset fetches (``fetch_offsets``) and the lane hand-over fence. For a partition
``T~L``-p of a lane topic asked by group A, the *family peer* P is ``G~L`` when A is the
trunk group ``G``, and ``G`` when A is ``G~L``; a group of another lane (``G~M``) has no
peer for ``T~L`` and gets its own committed offset, as for every trunk topic. Then:

- if P has members and P's assignment holds p — its members' current assignment
  (the ConsumerAssignment payloads of its last SyncGroup) when P is Stable, during a
  rebalance the assignment its last completed SyncGroup handed out — that partition's
  result is ``HANDOVER_IN_PROGRESS`` (retriable: the asking consumer keeps the partition
  paused and asks again), so two groups of a family never consume one lane partition at
  once;
- else the offset is ``max(committed(A), committed(P))`` (with that commit's metadata
  and leader epoch), none if neither committed: the group giving a lane partition up
  commits its position first, so the group taking it starts exactly where the other
  stopped, and neither reads a record twice nor skips one.

Each refused partition is counted by ``on_handover_refused`` (metrics).

Deleting a group (``delete_groups``) is allowed only when it has no member
(``NON_EMPTY_GROUP``); it writes tombstones for its offsets and its metadata.

Commits of deleted lane topics (``lane_topics_pushed``, called with every controller
push): when a push listing lanes no longer names a lane topic (``T~L``) that groups
coordinated here committed, tombstones drop those commits (of every group, as group
deletion writes them), so a lane topic deleted and later made again starts with no
commit: the fence's ``max(committed(G), committed(G~L))`` would otherwise make its new
consumers skip its first records. Trunk topics' commits are never touched. A partition
loaded later is cleaned the same way against the last push.

Every log operation runs off the event loop. A timer task checks sessions and
rebalance deadlines every ``tick_interval_ms`` against ``clock_ms``.

Thread safety: the coroutines run on one event loop (the broker's gRPC server loop);
``committed_offsets`` and ``partition_for`` may be called from any thread;
``lane_consumers`` from the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dataplane.broker.groups import family
from dataplane.broker.groups.codec import (
    GroupKey,
    GroupRecord,
    OffsetAndMetadata,
    OffsetKey,
    TxnEnd,
    TxnEndKey,
    TxnOffsetKey,
)
from dataplane.broker.groups.group import Group, GroupState, JoinResult, SyncResult
from dataplane.broker.groups.membership import JoinRequest, Membership, SessionBounds
from dataplane.broker.groups.store import Entry, OffsetsPartition, TopicPartitionKey
from dataplane.errors import ErrorCode, MeridianError
from dataplane.hashing import partition_for_key
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import StorageError
from dataplane.storage.log import wall_clock_ms
from dataplane.storage.manager import LogManager
from lanes.names import (
    SEPARATOR,
    InvalidLaneNameError,
    check_lane_name,
    split_group,
    trunk_group,
)

log = logging.getLogger(__name__)

# (transactional id, producer id, epoch, offsets partition) -> why not in its transaction
TxnVerify = Callable[[str, int, int, int], Awaitable[MeridianError | None]]

OFFSETS_TOPIC = "__consumer_offsets"
MAX_GROUP_ID_CHARS = 255
MAX_TOPIC_CHARS = 249

OFFSETS_LOG_CONFIG = LogConfig(
    durability=Durability.ALWAYS,
    retention_ms=-1,  # offsets leave the log by compaction only (store.py)
    retention_bytes=-1,
    max_segment_bytes=64 * 1024 * 1024,
    max_batch_bytes=16 * 1024 * 1024,
)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Limits and periods of the coordinator; every field names its unit."""

    min_session_timeout_ms: int = 1_000
    max_session_timeout_ms: int = 300_000
    max_metadata_bytes: int = 4096
    tick_interval_ms: int = 100
    compact_min_records: int = 10_000
    offsets_log_config: LogConfig = OFFSETS_LOG_CONFIG


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    generation_id: int
    leader_id: str
    members: tuple[MemberSummary, ...] = ()
    offsets: dict[TopicPartitionKey, OffsetAndMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str


@dataclass
class _Loaded:
    store: OffsetsPartition
    groups: dict[str, Group]
    # producer id -> how many transaction ends were taken for it (counted when the
    # marker arrives, before its record is written)
    txn_ends: dict[int, int] = field(default_factory=dict)
    # producer id -> (transactional id, epoch, txn_ends) its last verification confirmed
    txn_verified: dict[int, tuple[str, int, int]] = field(default_factory=dict)


class GroupCoordinator:
    """Coordinates the groups of the ``__consumer_offsets`` partitions this broker owns."""

    def __init__(
        self,
        *,
        broker_id: int,
        manager: LogManager,
        num_partitions: int,
        clock_ms: Callable[[], int] = wall_clock_ms,
        config: GroupConfig | None = None,
        on_handover_refused: Callable[[], None] | None = None,
        verify: TxnVerify | None = None,
    ) -> None:
        """``verify(transactional_id, producer_id, epoch, partition)``: None when
        ``__consumer_offsets`` partition ``partition`` is in the producer's open
        transaction, else why not (the transaction coordinator answers; set by the
        broker once its transaction coordinator exists)."""
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
        self.broker_id = broker_id
        self.manager = manager
        self.num_partitions = num_partitions
        self.config = config or GroupConfig()
        self._clock_ms = clock_ms
        self._on_handover_refused = on_handover_refused
        self.verify = verify
        self._loaded: dict[int, _Loaded] = {}
        self._loading: set[int] = set()
        self._failed: dict[int, str] = {}
        bounds = SessionBounds(
            self.config.min_session_timeout_ms, self.config.max_session_timeout_ms
        )
        self.membership = Membership(clock_ms=clock_ms, persist=self._persist, bounds=bounds)
        self._ticker: asyncio.Task[None] | None = None
        self._started = False
        # The lane topics of the last push listing lanes (None: no such push), and the
        # lane topics committed since while that push did not name them.
        self._lane_topics: frozenset[str] | None = None
        self._unlisted_commits: set[str] = set()

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, owned_partitions: Iterable[int]) -> None:
        """Load the owned partitions (replaying their logs) and start the timer task."""
        await self.load_partitions(owned_partitions)
        self._started = True
        if self._ticker is None:
            self._ticker = asyncio.ensure_future(self._tick_forever())

    async def stop(self) -> None:
        """Stop the timer, fail parked requests with ``NOT_COORDINATOR``, finish writes."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        await self.unload_partitions(list(self._loaded))
        await self.membership.drain()

    async def load_partitions(self, partitions: Iterable[int]) -> None:
        """Take over partitions (leadership gained): open or create, then replay."""
        wanted = [p for p in partitions if p not in self._loaded and p not in self._loading]
        for p in wanted:
            if not 0 <= p < self.num_partitions:
                raise ValueError(f"offsets partition {p} is outside [0, {self.num_partitions})")
        self._loading.update(wanted)
        try:
            for p in wanted:
                await self._load_one(p)
        finally:
            self._loading.difference_update(wanted)

    async def _load_one(self, partition: int) -> None:
        try:
            loaded = self._loaded[partition] = await asyncio.to_thread(self._load, partition)
            self._failed.pop(partition, None)
        except (StorageError, CorruptBatchError) as exc:  # refused until loaded again
            log.exception("offsets partition %d could not be loaded", partition)
            self._failed[partition] = str(exc)
            return
        if self._lane_topics is not None:  # deleted while another broker coordinated
            try:
                await self._forget_lane_offsets(loaded, self._lane_topics)
            except MeridianError:  # the next change of the pushed lane topics retries
                log.exception("offsets partition %d: dropping lane commits failed", partition)

    def _load(self, partition: int) -> _Loaded:
        partition_log = self.manager.get_or_create_log(
            OFFSETS_TOPIC, partition, self.config.offsets_log_config
        )
        store = OffsetsPartition(
            partition,
            partition_log,
            clock_ms=self._clock_ms,
            compact_min_records=self.config.compact_min_records,
        )
        count = store.replay()
        now = self._clock_ms()
        groups: dict[str, Group] = {}
        for group_id in store.group_ids():
            record = store.group_record(group_id)
            groups[group_id] = (
                Group.from_record(group_id, record, now) if record else Group(group_id)
            )
        log.info("offsets partition %d: %d records, %d groups", partition, count, len(groups))
        return _Loaded(store, groups)

    async def unload_partitions(self, partitions: Iterable[int]) -> None:
        """Give up partitions (leadership lost): their parked requests get NOT_COORDINATOR."""
        moved = MeridianError(ErrorCode.NOT_COORDINATOR, "the coordinator moved")
        for p in list(partitions):
            loaded = self._loaded.pop(p, None)
            if loaded is None:
                continue
            for group in loaded.groups.values():
                self.membership.shut_out(group, moved)
                group.state = GroupState.DEAD
            await loaded.store.close()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_interval_ms / 1000)
            for loaded in list(self._loaded.values()):
                for group in list(loaded.groups.values()):
                    self.membership.expire(group)

    # -- routing -----------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of ``group_id``'s family (its trunk group)."""
        return partition_for_key(trunk_group(group_id).encode(), self.num_partitions)

    def owned_partitions(self) -> set[int]:
        return set(self._loaded)

    def _partition(self, group_id: str) -> _Loaded:
        check_group_id(group_id)
        p = self.partition_for(group_id)
        if p in self._loading or not self._started:
            raise MeridianError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading partition {p}")
        loaded = self._loaded.get(p)
        if loaded is None and p in self._failed:
            raise MeridianError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{OFFSETS_TOPIC} partition {p} failed to load: {self._failed[p]}",
            )
        if loaded is None:
            raise MeridianError(
                ErrorCode.NOT_COORDINATOR,
                f"broker {self.broker_id} does not coordinate group {group_id!r} "
                f"({OFFSETS_TOPIC} partition {p})",
            )
        return loaded

    def _group(self, group_id: str) -> Group | None:
        return self._partition(group_id).groups.get(group_id)

    async def _persist(self, group_id: str, record: GroupRecord) -> None:
        await self._partition(group_id).store.write([(GroupKey(group_id), record)])

    # -- membership --------------------------------------------------------------------
    async def join(self, request: JoinRequest) -> JoinResult:
        groups = self._partition(request.group_id).groups
        group = groups.get(request.group_id)
        if group is None:
            group = groups[request.group_id] = Group(request.group_id)
        return await self.membership.join(group, request)

    async def sync(
        self, group_id: str, generation_id: int, member_id: str, assignments: Mapping[str, bytes]
    ) -> SyncResult:
        return await self.membership.sync(
            self._group(group_id), generation_id, member_id, assignments
        )

    async def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> None:
        self.membership.heartbeat(self._group(group_id), generation_id, member_id)

    async def leave(self, group_id: str, member_id: str) -> None:
        self.membership.leave(self._group(group_id), member_id)

    # -- offsets -----------------------------------------------------------------------
    async def commit_offsets(
        self, group_id: str, generation_id: int, member_id: str, commits: Sequence[OffsetCommit]
    ) -> dict[TopicPartitionKey, MeridianError | None]:
        """Commit offsets (module docstring); per-partition outcomes, None for success."""
        loaded = self._partition(group_id)
        self.membership.check_commit(loaded.groups.get(group_id), generation_id, member_id)
        results: dict[TopicPartitionKey, MeridianError | None] = {}
        entries: list[Entry] = []
        now = self._clock_ms()
        for commit in commits:
            tp = (commit.topic, commit.partition)
            results[tp] = error = self._check_commit(commit)
            if error is None:
                value = OffsetAndMetadata(commit.offset, commit.metadata, commit.leader_epoch, now)
                entries.append((OffsetKey(group_id, commit.topic, commit.partition), value))
        await loaded.store.write(entries)
        if entries and group_id not in loaded.groups:
            loaded.groups[group_id] = Group(group_id)
        listed = self._lane_topics
        if listed is not None:
            self._unlisted_commits.update(
                c.topic for c in commits if _unlisted_lane_topic(c.topic, listed)
            )
        return results

    def _check_commit(self, commit: OffsetCommit) -> MeridianError | None:
        if not commit.topic or len(commit.topic) > MAX_TOPIC_CHARS:
            return MeridianError(ErrorCode.INVALID_TOPIC, f"bad topic name {commit.topic!r}")
        if commit.partition < 0:
            return MeridianError(ErrorCode.INVALID_REQUEST, f"bad partition {commit.partition}")
        if commit.offset < 0:
            return MeridianError(ErrorCode.INVALID_COMMIT_OFFSET, f"bad offset {commit.offset}")
        size = len(commit.metadata.encode())
        if size > self.config.max_metadata_bytes:
            return MeridianError(
                ErrorCode.INVALID_COMMIT_OFFSET,
                f"metadata of {size} bytes exceeds {self.config.max_metadata_bytes}",
            )
        return None

    async def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartitionKey] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartitionKey, OffsetAndMetadata | MeridianError | None]:
        """Committed offsets of ``partitions`` (None: every one committed), None where
        none is; lane-topic partitions follow the hand-over fence, and with
        ``require_stable`` those an open transaction committed are
        ``UNSTABLE_OFFSET_COMMIT`` (module docstring)."""
        loaded = self._partition(group_id)
        offsets = loaded.store.offsets_of(group_id)
        wanted = list(offsets) if partitions is None else list(partitions)
        unstable = loaded.store.pending_partitions(group_id) if require_stable else set()
        return {
            tp: _unstable(tp)
            if tp in unstable
            else self._fenced(loaded, group_id, tp, offsets.get(tp))
            for tp in wanted
        }

    # -- transactions ------------------------------------------------------------------
    async def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        generation_id: int,
        member_id: str,
        commits: Sequence[OffsetCommit],
    ) -> dict[TopicPartitionKey, MeridianError | None]:
        """Offsets committed inside a transaction (module docstring): pending until it
        ends. Per-partition outcomes, None for success."""
        loaded = self._partition(group_id)
        self.membership.check_commit(
            loaded.groups.get(group_id), generation_id, member_id, transactional=True
        )
        pending = loaded.store.pending_epoch(producer_id)
        if pending is not None and producer_epoch < pending:
            raise MeridianError(
                ErrorCode.PRODUCER_FENCED,
                f"producer {producer_id} epoch {producer_epoch} is fenced by epoch {pending}",
            )
        ends = loaded.txn_ends.get(producer_id, 0)
        confirmed = (transactional_id, producer_epoch, ends)
        if loaded.txn_verified.get(producer_id) != confirmed:
            await self._verify_txn(transactional_id, producer_id, producer_epoch, group_id)
            if loaded.txn_ends.get(producer_id, 0) != ends:
                # The transaction's marker came while the coordinator answered: these
                # offsets would outlive it, and join the producer's next transaction.
                raise MeridianError(
                    ErrorCode.INVALID_TXN_STATE,
                    f"the transaction of producer {producer_id} epoch {producer_epoch} "
                    "ended while its offsets were being verified",
                )
            loaded.txn_verified[producer_id] = confirmed
        # No await from the checks to the write's enqueueing: a marker arriving now is
        # written after these offsets, and ends them.
        results: dict[TopicPartitionKey, MeridianError | None] = {}
        entries: list[Entry] = []
        now = self._clock_ms()
        for commit in commits:
            tp = (commit.topic, commit.partition)
            results[tp] = error = self._check_commit(commit)
            if error is None:
                key = TxnOffsetKey(
                    producer_id, producer_epoch, group_id, commit.topic, commit.partition
                )
                value = OffsetAndMetadata(commit.offset, commit.metadata, commit.leader_epoch, now)
                entries.append((key, value))
        await loaded.store.write(entries)
        if entries and group_id not in loaded.groups:
            loaded.groups[group_id] = Group(group_id)
        return results

    async def _verify_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> None:
        if self.verify is None:
            raise MeridianError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, "no transaction coordinator runs here yet"
            )
        partition = self.partition_for(group_id)
        error = await self.verify(transactional_id, producer_id, producer_epoch, partition)
        if error is not None:
            raise error

    async def complete_txn(
        self, partition: int, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """A transaction's marker for ``__consumer_offsets`` partition ``partition``: its
        producer's pending offsets there are applied (commit) or dropped, durably."""
        if partition in self._loading or not self._started:
            raise MeridianError(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading partition {partition}"
            )
        loaded = self._loaded.get(partition)
        if loaded is None:
            raise MeridianError(
                ErrorCode.NOT_COORDINATOR,
                f"broker {self.broker_id} does not host {OFFSETS_TOPIC} partition {partition}",
            )
        loaded.txn_ends[producer_id] = loaded.txn_ends.get(producer_id, 0) + 1
        loaded.txn_verified.pop(producer_id, None)
        await loaded.store.write([(TxnEndKey(producer_id), TxnEnd(producer_epoch, commit))])

    def _fenced(
        self,
        loaded: _Loaded,
        group_id: str,
        tp: TopicPartitionKey,
        own: OffsetAndMetadata | None,
    ) -> OffsetAndMetadata | MeridianError | None:
        peer_id = family.peer_group(group_id, tp[0])
        if peer_id is None:
            return own
        if tp in family.held_partitions(loaded.groups.get(peer_id)):
            if self._on_handover_refused is not None:
                self._on_handover_refused()
            return MeridianError(
                ErrorCode.HANDOVER_IN_PROGRESS,
                f"group {peer_id!r} still holds {tp[0]}-{tp[1]}: retry once it gives it up",
            )
        theirs = loaded.store.offsets_of(peer_id).get(tp)
        if own is None or (theirs is not None and theirs.offset > own.offset):
            return theirs
        return own

    def lane_consumers(self) -> list[tuple[str, list[str]]]:
        """Lane groups coordinated here with a member, and the lane topics their members
        subscribe to (``family.subscribed_lane_topics``)."""
        return [
            (group.group_id, sorted(family.subscribed_lane_topics(group)))
            for loaded in list(self._loaded.values())
            for group in list(loaded.groups.values())
            if SEPARATOR in group.group_id and group.members
        ]

    def committed_offsets(self) -> dict[str, dict[TopicPartitionKey, int]]:
        """Group -> (topic, partition) -> committed offset, over the loaded partitions."""
        merged: dict[str, dict[TopicPartitionKey, int]] = {}
        for loaded in list(self._loaded.values()):
            merged.update(loaded.store.committed_offsets())
        return merged

    # -- lane topics deleted -------------------------------------------------------------
    async def lane_topics_pushed(self, listed: Iterable[str] | None) -> int:
        """Drop the commits of lane topics the controller no longer names, so a lane
        topic deleted and later made again starts with no commit; returns how many.

        ``listed``: the topics of a push listing lanes (its lane topics are those that
        exist), or None (no such push: lane topics are left alone). Cheap: it scans the
        offsets only when the pushed lane topics changed, or when a lane topic the push
        did not name was committed since the last push (a consumer giving up a
        partition of a topic being deleted commits after the push that dropped it).
        Trunk topics' commits are never touched."""
        if listed is None:
            self._lane_topics = None
            self._unlisted_commits.clear()
            return 0
        lane_topics = frozenset(topic for topic in listed if SEPARATOR in topic)
        changed = lane_topics != self._lane_topics
        committed = bool(self._unlisted_commits - lane_topics)
        self._lane_topics = lane_topics
        self._unlisted_commits.clear()
        if not (changed or committed):
            return 0
        dropped = 0
        for loaded in list(self._loaded.values()):
            dropped += await self._forget_lane_offsets(loaded, lane_topics)
        return dropped

    async def _forget_lane_offsets(self, loaded: _Loaded, lane_topics: frozenset[str]) -> int:
        """Tombstones (as ``delete_groups`` writes) for ``loaded``'s commits of lane
        topics not in ``lane_topics``; a group left with no commit, no metadata and no
        member is forgotten, as a replay of the log would."""
        keys = await asyncio.to_thread(
            loaded.store.offset_keys, lambda topic: _unlisted_lane_topic(topic, lane_topics)
        )
        if not keys:
            return 0
        await loaded.store.write([(key, None) for key in keys])
        known = loaded.store.group_ids()
        for group_id in {key.group_id for key in keys} - known:
            group = loaded.groups.get(group_id)
            if group is not None and not group.members and group.state is GroupState.EMPTY:
                del loaded.groups[group_id]
        log.info(
            "offsets partition %d: dropped %d commits of deleted lane topics",
            loaded.store.partition,
            len(keys),
        )
        return len(keys)

    # -- administration ----------------------------------------------------------------
    def describe(self, group_id: str) -> GroupSummary:
        """A group's state, members and committed offsets; ``GROUP_ID_NOT_FOUND`` if none."""
        loaded = self._partition(group_id)
        group = loaded.groups.get(group_id)
        if group is None:
            raise MeridianError(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group_id!r}")
        members = tuple(
            MemberSummary(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, m.assignment
            )
            for m in group.members.values()
        )
        return GroupSummary(
            group_id,
            group.state.value,
            group.protocol_type,
            group.protocol_name,
            group.generation_id,
            group.leader_id,
            members,
            loaded.store.offsets_of(group_id),
        )

    def list_groups(self) -> list[GroupListing]:
        return [
            GroupListing(group.group_id, group.state.value, group.protocol_type)
            for loaded in self._loaded.values()
            for group in loaded.groups.values()
        ]

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, MeridianError | None]:
        """Delete Empty groups with their offsets; per-group outcomes, None for success."""
        results: dict[str, MeridianError | None] = {}
        for group_id in group_ids:
            try:
                await self._delete(group_id)
                results[group_id] = None
            except MeridianError as exc:
                results[group_id] = exc
        return results

    async def _delete(self, group_id: str) -> None:
        loaded = self._partition(group_id)
        group = loaded.groups.get(group_id)
        if group is None:
            raise MeridianError(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group_id!r}")
        if group.members or group.state is not GroupState.EMPTY:
            raise MeridianError(
                ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} is {group.state.value}"
            )
        entries: list[Entry] = [
            (OffsetKey(group_id, topic, partition), None)
            for topic, partition in loaded.store.offsets_of(group_id)
        ]
        entries.append((GroupKey(group_id), None))
        del loaded.groups[group_id]
        group.state = GroupState.DEAD
        try:
            await loaded.store.write(entries)
        except MeridianError:
            group.state = GroupState.EMPTY
            loaded.groups.setdefault(group_id, group)
            raise


def _unstable(tp: TopicPartitionKey) -> MeridianError:
    return MeridianError(
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        f"{tp[0]}-{tp[1]}: a transaction that committed an offset has not ended yet",
    )


def _unlisted_lane_topic(topic: str, lane_topics: frozenset[str]) -> bool:
    return SEPARATOR in topic and topic not in lane_topics


def check_group_id(group_id: str) -> None:
    """``INVALID_GROUP_ID`` unless ``group_id`` has 1 to ``MAX_GROUP_ID_CHARS``
    characters and, holding ``~``, is a lane group ``G~L``: a non-empty trunk group,
    one ``~`` and a valid lane name (``lanes.names.check_lane_name``)."""
    if not group_id or len(group_id) > MAX_GROUP_ID_CHARS:
        raise MeridianError(
            ErrorCode.INVALID_GROUP_ID,
            f"a group id has 1 to {MAX_GROUP_ID_CHARS} characters, got {len(group_id)}",
        )
    trunk, lane = split_group(group_id)
    if lane is None:
        return
    try:
        check_lane_name(lane)  # a second '~' is no lane name character either
    except InvalidLaneNameError as exc:
        reason = str(exc)
    else:
        if trunk:
            return
        reason = "the group before it is empty"
    raise MeridianError(
        ErrorCode.INVALID_GROUP_ID,
        f"{group_id!r} is no lane group <group>{SEPARATOR}<lane>: {reason}",
    )
