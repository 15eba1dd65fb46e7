"""The replication state of one partition: its role, the ISR, followers' progress, HW.

A partition the controller's push names gets a ``ReplicaState`` (``Partition.replica``);
one it does not name keeps ``None`` and behaves as before replication (the hosting broker
leads, the high watermark follows the log).

On the leader (as Kafka):

- each follower's LEO is the ``fetch_offset`` of its last ``ReplicaFetch``; it was
  *caught up* at a fetch whose offset reached the leader's LEO at that time, or at the
  previous fetch if this one reached the LEO the leader had then;
- the high watermark is the minimum LEO over the *maximal ISR* (the committed ISR plus
  proposed additions; the leader counts with its LEO, or its recovery point with
  ``durability=always``); it only moves forward;
- ISR changes are proposals (``proposal``) the controller commits by pushing a newer
  ``isr_version``; until then a shrink is not applied (the lagging follower still holds
  the high watermark back) and the min-ISR check uses the committed ISR;
- once a proposal was reported to the controller (``mark_reported``), the controller may
  commit it whatever the leader thinks later: its additions (``reported_additions``) stay
  in the maximal ISR and in every later proposal until a push brings a newer
  ``isr_version`` or leader epoch (``forget_proposal``), so a replica that may enter the
  ISR has every record the HW covers.

Thread safety: event-loop only, except ``lock``, which serialises role changes with a
follower's appends (both run on the I/O pool).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from enum import Enum

from dataplane.storage.config import Durability
from dataplane.storage.leader_epoch import LeaderEpochCache
from dataplane.storage.log import PartitionLog


class Role(Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


@dataclass(slots=True)
class FollowerProgress:
    log_end_offset: int = -1  # unknown until its first fetch
    last_caught_up_s: float = 0.0  # monotonic
    last_fetch_s: float = 0.0
    leader_leo_at_last_fetch: int = -1


@dataclass
class ReplicaState:
    """See the module docstring."""

    broker_id: int  # this broker
    epochs: LeaderEpochCache
    role: Role = Role.OFFLINE
    leader_id: int = -1
    leader_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)  # committed
    isr_version: int = 0
    min_insync_replicas: int = 1
    proposal: list[int] | None = None  # the ISR asked of the controller, if any
    reported_additions: set[int] = field(default_factory=set)  # may be committed
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def maximal_isr(self) -> set[int]:
        """The committed ISR plus the proposed additions: whose LEO bounds the HW."""
        members = set(self.isr) | self.reported_additions
        if self.proposal is not None:
            members |= set(self.proposal)
        members.add(self.broker_id)
        return members

    def committed_isr_size(self) -> int:
        return len(set(self.isr) | {self.broker_id})

    # -- the leader's bookkeeping --------------------------------------------------------
    def start_leading(self, now_s: float | None = None) -> None:
        """Forget followers' progress; ISR members count as caught up now (so none is
        dropped before it had time to fetch from this leader)."""
        now = time.monotonic() if now_s is None else now_s
        self.followers = {
            replica: FollowerProgress(last_caught_up_s=now if replica in self.isr else 0.0)
            for replica in self.replicas
            if replica != self.broker_id
        }
        self.forget_proposal()

    def follower_fetched(self, replica: int, fetch_offset: int, leader_leo: int) -> None:
        now = time.monotonic()
        progress = self.followers.get(replica)
        if progress is None:
            progress = self.followers[replica] = FollowerProgress()
        if fetch_offset >= leader_leo:
            progress.last_caught_up_s = now
        elif fetch_offset >= progress.leader_leo_at_last_fetch >= 0:
            progress.last_caught_up_s = max(progress.last_caught_up_s, progress.last_fetch_s)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_s = now
        progress.leader_leo_at_last_fetch = leader_leo

    def high_watermark(self, log: PartitionLog) -> int:
        """The HW the maximal ISR allows now (the caller only ever raises the log's)."""
        own = log.log_end_offset
        if log.config.durability is Durability.ALWAYS:
            own = min(own, log.recovery_point)
        for replica in self.maximal_isr():
            if replica == self.broker_id:
                continue
            progress = self.followers.get(replica)
            own = min(own, progress.log_end_offset if progress is not None else -1)
        return own

    def desired_isr(self, log: PartitionLog, lag_s: float, now_s: float | None = None) -> list[int]:
        """The ISR this leader would like: the committed one without followers behind
        for more than ``lag_s``, plus followers fetching now that reached the HW and the
        start of the current epoch."""
        now = time.monotonic() if now_s is None else now_s
        epoch_start = self.epochs.start_offset_of(self.leader_epoch) or 0
        wanted = {self.broker_id}
        for replica in self.replicas:
            if replica == self.broker_id:
                continue
            progress = self.followers.get(replica)
            if progress is None:
                continue
            if replica in self.isr:
                if now - progress.last_caught_up_s <= lag_s:
                    wanted.add(replica)
            elif (
                progress.log_end_offset >= max(log.high_watermark, epoch_start)
                and now - progress.last_fetch_s <= lag_s / 2
            ):
                # Fetching now (a live follower fetches at least every lag / 3), not
                # merely caught up at its last fetch before it died.
                wanted.add(replica)
        return sorted(wanted)

    def update_proposal(self, desired: list[int]) -> bool:
        """Set (or drop) the proposal for ``desired``; True when it changed. Additions
        already reported are never withdrawn: the controller may commit them."""
        wanted = set(desired) | self.reported_additions
        new = None if wanted == set(self.isr) | {self.broker_id} else sorted(wanted)
        if new == self.proposal:
            return False
        self.proposal = new
        return True

    def mark_reported(self) -> None:
        """The current proposal was sent to the controller (it may commit it)."""
        if self.proposal is not None:
            self.reported_additions |= set(self.proposal) - set(self.isr)

    def forget_proposal(self) -> None:
        """A push answered (newer ``isr_version`` or leader epoch): earlier proposals
        can no longer be committed."""
        self.proposal = None
        self.reported_additions = set()
