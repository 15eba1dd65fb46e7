"""``ReplicaManager``: applies the controller's push to the hosted partitions.

For every hosted partition the push names (``apply``, after each accepted push and at
start from the persisted one):

- ``leader_id`` is this broker: it leads at ``leader_epoch``. Becoming leader records
  (epoch, LEO) in the partition's leader-epoch cache, marks the log replicated (the HW
  moves only with the ISR) and forgets followers' progress;
- another broker: this broker follows it (``FollowerFetchers`` pulls from it);
- ``leader_id`` -1: offline, serving nothing.

A partition of a topic the push names with more than one replica, created before the
push names it, is offline until it does; so is a partition of a topic no push names yet
once the push replicates any topic (its controller places every topic). Otherwise a
hosted partition no push names is led here, unreplicated.

At start the persisted push is applied with this broker's leaderships of partitions with
more than one replica offline until the first live push (the controller may have moved
them while this broker was down); single-replica partitions lead at once.

A push with a leader epoch older than the one applied is ignored for that partition;
one with the same epoch only updates the committed ISR (a newer ``isr_version`` ends the
proposal it answers). A partition of a topic the push names, the push not naming it,
is left as it is (as a push left it, or unreplicated: see above); internal topics
(``__consumer_offsets``) are never replicated. A push naming a partition this broker
does not host yet applies when ``CreatePartitions`` creates it (``apply_current``).

The leader moves the high watermark (``update_high_watermark``) when a follower fetches
or it appends, and wakes consumers and acks=all waiters (``Partition.notify``) when it
moves. A periodic check proposes ISR shrinks (a follower behind for
``replica_lag_time_max_ms``); ``proposals`` are sent back on every heartbeat.

Thread safety: event-loop only; blocking work goes to the I/O pool. Pushes apply one at
a time, each to its end once begun, whether or not its caller waits (``apply``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.broker.partitions import Partition, PartitionRegistry
from dataplane.broker.producers import ProducerStateTable
from dataplane.broker.replication.state import FollowerProgress, ReplicaState, Role
from dataplane.broker.topics import is_internal
from dataplane.delays import is_timer_topic
from dataplane.storage.leader_epoch import LeaderEpochCache

log = logging.getLogger(__name__)
T = TypeVar("T")


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        registry: PartitionRegistry,
        executor: Executor,
        *,
        replica_lag_time_max_ms: int,
        on_follow: Callable[[Partition], None] | None = None,
    ) -> None:
        """``on_follow(part)`` is told whenever a partition's role or leader changed
        (the follower fetchers re-read who to pull from)."""
        self.broker_id = broker_id
        self.registry = registry
        self._executor = executor
        self.lag_s = replica_lag_time_max_ms / 1000
        self.on_follow = on_follow
        self._current: admin_pb2.UpdateMetadataRequest | None = None
        self._live = False  # a push arrived since start (not only the saved one)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._check_isr_forever(), name="isr-check")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _check_isr_forever(self) -> None:
        interval = max(0.05, self.lag_s / 4)
        while True:
            await asyncio.sleep(interval)
            for part in self.registry.all():
                if part.replica is not None and part.replica.is_leader:
                    self.maybe_change_isr(part)

    # -- applying pushes ----------------------------------------------------------------
    async def apply(
        self, push: admin_pb2.UpdateMetadataRequest | None, *, saved: bool = False
    ) -> None:
        """Apply ``push`` (None: the last one again) to every hosted partition it names.
        ``saved``: the push persisted before a restart, applied at start; until a live
        push arrives, the leaderships it names of partitions with more than one replica
        are offline (the controller may have moved them meanwhile: leading at the old
        epoch would accept appends a newer leader never sees); single-replica ones lead,
        so a broker keeps serving them across its restart with no controller running.

        Once begun, it runs to its end even if the caller is cancelled (a push whose
        deadline passed, as when a paused broker resumes): a role change under way in
        the I/O pool cannot be called back, and left half done it is a follower no
        fetcher pulls, which a later push at the same epoch finds nothing to change in.
        The caller's cancellation is raised once the apply is done."""
        applying = asyncio.ensure_future(self._apply(push, saved))
        try:
            await asyncio.shield(applying)
        except asyncio.CancelledError:
            await asyncio.wait([applying])
            raise

    async def _apply(self, push: admin_pb2.UpdateMetadataRequest | None, saved: bool) -> None:
        async with self._lock:
            if push is not None:
                self._current = push
                self._live = self._live or not saved
            if self._current is None:
                return
            unreplicated: dict[str, list[Partition]] = {}
            for hosted in self.registry.all():
                if hosted.replica is None and not hosted.deleted:
                    unreplicated.setdefault(hosted.topic, []).append(hosted)
            for topic in self._current.topics:
                if _unreplicated(topic.name):
                    continue  # __consumer_offsets stays with its static owner, unreplicated
                min_isr = max(1, topic.min_insync_replicas)
                for meta in topic.partitions:
                    part = self.registry.get(topic.name, meta.partition)
                    if part is not None and not part.deleted:
                        await self._apply_one(part, self._restrained(meta), min_isr)
                await self._hold_unnamed(topic, unreplicated.get(topic.name, []), min_isr)
            if _replicates(self._current):
                named = {topic.name for topic in self._current.topics}
                for name, parts in unreplicated.items():
                    if name not in named and not _unreplicated(name):
                        await self._hold_unpushed(parts)

    async def _hold_unnamed(
        self, topic: admin_pb2.MetadataTopic, parts: list[Partition], min_isr: int
    ) -> None:
        """Partitions of a replicated topic the push does not name yet (created ahead of
        it) are offline until it does: leading unreplicated, each replica would accept
        appends of its own."""
        if not any(len(set(meta.replicas)) > 1 for meta in topic.partitions):
            return
        named = {meta.partition for meta in topic.partitions}
        for part in parts:
            if part.index not in named and part.replica is None and not part.deleted:
                unnamed = admin_pb2.MetadataPartition(
                    partition=part.index, leader_id=-1, leader_epoch=-1
                )
                await self._apply_one(part, unnamed, min_isr)

    async def _hold_unpushed(self, parts: list[Partition]) -> None:
        """Partitions of a topic no push names yet (``CreatePartitions`` ran ahead of the
        push that places it) are offline until one does, on a broker whose controller
        replicates topics: leading unreplicated, a replica would acknowledge appends
        (acks=all too) that the push may then make it drop as a follower."""
        for part in parts:
            if part.replica is None and not part.deleted:
                unnamed = admin_pb2.MetadataPartition(
                    partition=part.index, leader_id=-1, leader_epoch=-1
                )
                await self._apply_one(part, unnamed, 1)

    def _restrained(self, meta: admin_pb2.MetadataPartition) -> admin_pb2.MetadataPartition:
        """``meta`` as applied now: a leadership of this broker from the saved push,
        of a partition with more than one replica, is offline until a live push."""
        if self._live or meta.leader_id != self.broker_id or len(set(meta.replicas)) <= 1:
            return meta
        offline = admin_pb2.MetadataPartition()
        offline.CopyFrom(meta)
        offline.leader_id = -1
        return offline

    async def apply_current(self) -> None:
        """Apply the last push again (partitions created since may be named by it)."""
        await self.apply(None)

    async def _apply_one(
        self, part: Partition, meta: admin_pb2.MetadataPartition, min_isr: int
    ) -> None:
        state = part.replica
        if state is None:
            epochs = await self._run(functools.partial(_load_epochs, part))
            state = ReplicaState(self.broker_id, epochs)
        if meta.leader_epoch < state.leader_epoch:
            return  # an older leadership than the one applied
        state.min_insync_replicas = min_isr
        if meta.leader_id == -1:
            role = Role.OFFLINE
        elif meta.leader_id == self.broker_id:
            role = Role.LEADER
        else:
            role = Role.FOLLOWER
        same = (
            part.replica is state
            and state.role is role
            and state.leader_epoch == meta.leader_epoch
            and state.leader_id == meta.leader_id
        )
        if same:
            self._update_isr(part, state, meta)
            return
        await self._run(functools.partial(self._change_role, part, state, meta, role))
        log.info(
            "%s-%s: %s at leader epoch %d (leader %d, isr %s)",
            part.topic,
            part.index,
            role.value,
            meta.leader_epoch,
            meta.leader_id,
            list(meta.isr),
        )
        if role is Role.LEADER:
            self.update_high_watermark(part)
        part.notify()  # acks=all waiters and fetches look at the new role
        part.notify_append()  # a waiting ReplicaFetch answers with it too
        if self.on_follow is not None:
            self.on_follow(part)

    def _change_role(
        self,
        part: Partition,
        state: ReplicaState,
        meta: admin_pb2.MetadataPartition,
        role: Role,
    ) -> None:
        """Blocking, under the state's lock and the log's append lock: no follower or
        client append overlaps it (a client append checks the role and epoch under the
        append lock). A new leader records (epoch, LEO) and forgets followers' progress
        before it takes the role; a broker that stops leading drops the role first (the
        event loop reads the state without locks). A follower knowing no epoch drops
        the records it holds (``_drop_unstamped``). The partition's ``replica`` is
        ``state`` once it returns."""
        with state.lock:
            self._take_role(part, state, meta, role)
            if role is Role.FOLLOWER and not state.epochs.entries:
                _drop_unstamped(part)

    @staticmethod
    def _take_role(
        part: Partition, state: ReplicaState, meta: admin_pb2.MetadataPartition, role: Role
    ) -> None:
        with part.log.append_lock():
            part.log.replicated = True
            if role is not Role.LEADER:
                state.role = role
            else:
                state.epochs.assign(meta.leader_epoch, part.log.log_end_offset)
            state.leader_id = meta.leader_id
            state.replicas = list(meta.replicas)
            state.isr = list(meta.isr)
            state.isr_version = meta.isr_version
            state.forget_proposal()
            if role is Role.LEADER:
                state.start_leading()
            state.leader_epoch = meta.leader_epoch
            state.role = role
            # Installed before the append lock is released: a client append after it
            # is checked against (and stamped with) this role and epoch, never taken
            # for an append to a partition no push has named (unstamped, at the start
            # offset the new epoch was just given).
            part.replica = state

    def _update_isr(
        self, part: Partition, state: ReplicaState, meta: admin_pb2.MetadataPartition
    ) -> None:
        state.replicas = list(meta.replicas)
        if meta.isr_version <= state.isr_version:
            return
        state.isr = list(meta.isr)
        state.isr_version = meta.isr_version
        state.forget_proposal()
        if state.is_leader:
            for replica in state.replicas:
                state.followers.setdefault(replica, _fresh_progress())
            self.update_high_watermark(part)
            self.maybe_change_isr(part)
        part.notify()  # acks=all waiters re-check the committed ISR

    # -- the leader's high watermark and ISR --------------------------------------------
    def update_high_watermark(self, part: Partition) -> None:
        """Raise the HW to what the maximal ISR allows; wake readers if it moved."""
        state = part.replica
        if state is None or not state.is_leader:
            return
        before = part.log.high_watermark
        if part.log.update_high_watermark(state.high_watermark(part.log)) > before:
            part.notify()

    def follower_fetched(self, part: Partition, replica: int, fetch_offset: int) -> None:
        state = part.replica
        if state is None or not state.is_leader:
            return
        state.follower_fetched(replica, fetch_offset, part.log.log_end_offset)
        if replica not in state.maximal_isr():
            self.maybe_change_isr(part)
        self.update_high_watermark(part)

    def maybe_change_isr(self, part: Partition) -> None:
        state = part.replica
        if state is None or not state.is_leader:
            return
        if state.update_proposal(state.desired_isr(part.log, self.lag_s)):
            log.info(
                "%s-%s: proposing isr %s (committed %s, version %d)",
                part.topic,
                part.index,
                state.proposal,
                state.isr,
                state.isr_version,
            )
            self.update_high_watermark(part)

    def proposals(self) -> list[admin_pb2.IsrProposal]:
        """The ISR changes this broker asks the controller to commit (heartbeat); each
        returned one counts as reported (its additions are never withdrawn)."""
        found = []
        for part in self.registry.all():
            state = part.replica
            if state is not None and state.is_leader and state.proposal is not None:
                state.mark_reported()
                found.append(
                    admin_pb2.IsrProposal(
                        topic=part.topic,
                        partition=part.index,
                        leader_epoch=state.leader_epoch,
                        isr_version=state.isr_version,
                        isr=state.proposal,
                    )
                )
        return found


def _fresh_progress() -> FollowerProgress:
    return FollowerProgress()


def _load_epochs(part: Partition) -> LeaderEpochCache:
    log_ = part.log
    return LeaderEpochCache.load(log_.directory, log_.batch_headers(log_.log_start_offset))


def rebuild_producers(part: Partition) -> None:
    """After a truncation: the producer table from what is left of the log (blocking)."""
    if part.producers.aborted is not None:
        part.producers.aborted.close()
    part.producers = ProducerStateTable.rebuild(part.log)


def _drop_unstamped(part: Partition) -> None:
    """A follower knowing no epoch: whatever its log holds was appended without one
    (before any push named the partition) and cannot be compared with the leader's;
    it restarts from its log start (blocking, under the state's lock)."""
    log_ = part.log
    if log_.log_end_offset > log_.log_start_offset:
        log.info(
            "%s-%s: following with records of no leader epoch: truncating %d -> %d",
            part.topic,
            part.index,
            log_.log_end_offset,
            log_.log_start_offset,
        )
        log_.truncate_to(log_.log_start_offset)
        rebuild_producers(part)


def _replicates(push: admin_pb2.UpdateMetadataRequest) -> bool:
    """Whether ``push`` places any partition on more than one broker."""
    return any(len(set(meta.replicas)) > 1 for topic in push.topics for meta in topic.partitions)


def _unreplicated(topic: str) -> bool:
    """Internal topics are left alone, but for timer logs, replicated as any topic."""
    return is_internal(topic) and not is_timer_topic(topic)
