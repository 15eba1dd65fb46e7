"""Leader election and ISR changes of one partition, as pure functions (DESIGN decision 6).

The controller is the only one that moves leadership. Given a partition's committed
state (``Replication``) and which brokers are live, ``elect`` returns the next state:

- the controller's own ISR shrink: a broker it considers dead leaves every ISR it is in
  (so acks=all writes resume without waiting for the leader's lag timeout) — unless no
  ISR member is live, when the ISR is kept as it is: its members are the only replicas
  known to hold every acknowledged record, and one of them is elected when it returns;
- failover: a partition without a live leader gets the first live replica (in replicas
  order) that is in the ISR; with none, and the topic opted into unclean election, the
  first live replica at all (its ISR is then itself alone: records acknowledged only by
  the others may be lost, which the audit says); else no leader (offline);
- preferred leader: a live leader that is not ``replicas[0]`` hands leadership to it
  once it is live, in the ISR and ``settled`` (live for a while, so a flapping broker
  does not take leadership back and forth).

``leader_epoch`` grows at every change of leader, including going offline (the first
election of a partition keeps 0); ``isr_version`` at every change of the ISR.

``commit_proposal`` judges a leader's ISR change request (Kafka's AlterPartition).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum


class Why(StrEnum):
    """Why a partition's leadership changed."""

    FIRST = "first"  # never had a leader: the first election
    FAILOVER = "failover"  # its leader died: an ISR member took over
    UNCLEAN = "unclean"  # no ISR member was live: an out-of-sync replica took over
    OFFLINE = "offline"  # no replica may lead
    PREFERRED = "preferred"  # back to the preferred leader
    REASSIGNED = "reassigned"  # its leader left the replicas


@dataclass(frozen=True)
class Replication:
    """A partition's committed replication state, by broker id (``leader`` None: no
    leader). ``isr`` is kept in ``replicas`` order."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int | None
    leader_epoch: int
    isr_version: int

    def with_isr(self, isr: Collection[int]) -> Replication:
        """This state with ``isr`` (ordered like the replicas) and, when it differs
        from the current one, the next ``isr_version``."""
        ordered = ordered_like(self.replicas, isr)
        if set(ordered) == set(self.isr):
            return self
        return replace(self, isr=ordered, isr_version=self.isr_version + 1)

    def with_leader(self, leader: int | None) -> Replication:
        """This state led by ``leader`` and, when it is a change, the next epoch (the
        first election of a partition that never had a leader keeps epoch 0)."""
        if leader == self.leader:
            return self
        first = self.leader is None and self.leader_epoch == 0 and leader is not None
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + (not first))


@dataclass(frozen=True)
class Election:
    """The state after ``elect`` and, if leadership changed, why."""

    state: Replication
    why: Why | None = None


def ordered_like(replicas: Sequence[int], members: Collection[int]) -> tuple[int, ...]:
    """``members`` in ``replicas`` order (members that are not replicas go last, sorted)."""
    wanted = set(members)
    return tuple(r for r in replicas if r in wanted) + tuple(sorted(wanted - set(replicas)))


def elect(
    state: Replication,
    live: Collection[int],
    *,
    unclean_allowed: bool,
    settled: Collection[int] = (),
) -> Election:
    """The next state of the partition (see the module docstring)."""
    live_isr = [b for b in state.isr if b in live]
    shrunk = state.with_isr(live_isr) if live_isr else state
    if state.leader is not None and state.leader in live and state.leader in state.replicas:
        return _rebalance(shrunk, settled)
    candidates = [r for r in state.replicas if r in live and r in shrunk.isr]
    if candidates:
        why = Why.FIRST if state.leader is None and state.leader_epoch == 0 else Why.FAILOVER
        return Election(shrunk.with_leader(candidates[0]), why)
    survivors = [r for r in state.replicas if r in live]
    if unclean_allowed and survivors:
        return Election(shrunk.with_isr(survivors[:1]).with_leader(survivors[0]), Why.UNCLEAN)
    offline = shrunk.with_leader(None)
    return Election(offline, Why.OFFLINE if offline.leader != state.leader else None)


def _rebalance(state: Replication, settled: Collection[int]) -> Election:
    preferred = state.replicas[0]
    if preferred != state.leader and preferred in settled and preferred in state.isr:
        return Election(state.with_leader(preferred), Why.PREFERRED)
    return Election(state)


def commit_proposal(
    state: Replication,
    *,
    proposer: int,
    leader_epoch: int,
    isr_version: int,
    isr: Collection[int],
    live: Collection[int],
) -> Replication | None:
    """The state with the proposed ISR committed (``isr_version`` + 1), or None when
    the proposal must be ignored: the proposer is not the current leader, its leader
    epoch or the ISR version it is based on is not the stored one (a stale proposal),
    the new ISR is not a subset of the replicas or lacks the leader, or it changes
    nothing.

    A current proposal that adds a broker the controller considers dead is refused in a
    way the leader sees: the ISR stays as it is under the next ``isr_version``. The
    leader keeps a reported addition in its high watermark until a newer version
    answers it (the addition might have been committed), so without this answer its
    high watermark would wait for the dead broker."""
    proposed = set(isr)
    valid = (
        state.leader == proposer
        and leader_epoch == state.leader_epoch
        and isr_version == state.isr_version
        and proposed <= set(state.replicas)
        and proposer in proposed
    )
    if not valid or proposed == set(state.isr):
        return None
    if any(b not in live for b in proposed - set(state.isr)):
        return replace(state, isr_version=state.isr_version + 1)
    return state.with_isr(proposed)


def finish_reassignment(
    state: Replication, target: Sequence[int], live: Collection[int]
) -> Election | None:
    """The state once a reassignment to ``target`` is done, or None while it cannot be:
    not every target replica is in the ISR yet, or no target replica can lead (the
    leader is leaving and no live target replica is in the ISR). The replicas become
    ``target``, the leaving ones leave the ISR, and a leaving leader hands over to the
    first live in-sync target replica."""
    if not set(target) <= set(state.isr):
        return None
    leader = state.leader if state.leader in target else None
    if leader is None:
        leader = next((b for b in target if b in live and b in state.isr), None)
    if leader is None:
        return None
    moved = replace(state, replicas=tuple(target)).with_isr([b for b in state.isr if b in target])
    result = moved.with_leader(leader)
    return Election(result, Why.REASSIGNED if result.leader != state.leader else None)
