"""The controller's election and ISR rules as pure functions: failover from the ISR,
the dead leave every ISR, unclean election only when opted into, offline partitions
coming back, preferred leaders, proposals judged by epoch and ISR version, and the end
of a reassignment."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controlplane.topics.election import (
    Replication,
    Why,
    commit_proposal,
    elect,
    finish_reassignment,
)


def _state(
    replicas: tuple[int, ...] = (1, 2, 3),
    isr: tuple[int, ...] | None = None,
    leader: int | None = 1,
    leader_epoch: int = 4,
    isr_version: int = 7,
) -> Replication:
    return Replication(
        replicas, replicas if isr is None else isr, leader, leader_epoch, isr_version
    )


def test_a_live_leader_in_a_full_isr_changes_nothing() -> None:
    state = _state()
    assert elect(state, {1, 2, 3}, unclean_allowed=False).state == state


def test_the_first_election_picks_the_preferred_replica_and_keeps_epoch_zero() -> None:
    result = elect(_state(leader=None, leader_epoch=0, isr_version=0), {1, 2, 3},
                   unclean_allowed=False)  # fmt: skip
    assert (result.state.leader, result.state.leader_epoch, result.why) == (1, 0, Why.FIRST)


def test_a_dead_leader_fails_over_to_the_first_live_isr_member_and_leaves_the_isr() -> None:
    result = elect(_state(), {2, 3}, unclean_allowed=False)
    assert result.why == Why.FAILOVER
    assert (result.state.leader, result.state.leader_epoch) == (2, 5)
    assert (result.state.isr, result.state.isr_version) == ((2, 3), 8)


def test_failover_skips_live_replicas_that_are_out_of_sync() -> None:
    result = elect(_state(isr=(1, 3)), {2, 3}, unclean_allowed=False)
    assert (result.state.leader, result.state.isr) == (3, (3,))


def test_a_dead_follower_leaves_the_isr_and_the_leader_stays() -> None:
    result = elect(_state(), {1, 2}, unclean_allowed=False)
    assert result.why is None
    assert (result.state.leader, result.state.leader_epoch) == (1, 4)
    assert (result.state.isr, result.state.isr_version) == ((1, 2), 8)


def test_no_live_isr_member_without_unclean_election_is_offline_and_keeps_the_isr() -> None:
    result = elect(_state(isr=(1,)), {2, 3}, unclean_allowed=False)
    assert result.why == Why.OFFLINE
    assert (result.state.leader, result.state.leader_epoch) == (None, 5)
    assert (result.state.isr, result.state.isr_version) == ((1,), 7)
    # Stays offline (no new epoch) while no ISR member returns ...
    assert elect(result.state, {2, 3}, unclean_allowed=False).state == result.state
    # ... and the ISR member that returns is elected.
    back = elect(result.state, {1, 2, 3}, unclean_allowed=False)
    assert (back.state.leader, back.state.leader_epoch, back.why) == (1, 6, Why.FAILOVER)


def test_unclean_election_elects_a_live_replica_out_of_sync_with_itself_as_isr() -> None:
    result = elect(_state(isr=(1,)), {2, 3}, unclean_allowed=True)
    assert result.why == Why.UNCLEAN
    assert (result.state.leader, result.state.leader_epoch) == (2, 5)
    assert (result.state.isr, result.state.isr_version) == ((2,), 8)


def test_nothing_live_is_offline_even_with_unclean_election() -> None:
    result = elect(_state(), set(), unclean_allowed=True)
    assert (result.state.leader, result.why) == (None, Why.OFFLINE)
    assert result.state.isr == (1, 2, 3)


def test_the_preferred_leader_takes_over_once_settled_and_in_sync() -> None:
    state = _state(leader=2)
    assert elect(state, {1, 2, 3}, unclean_allowed=False).state == state  # not settled
    not_in_sync = _state(leader=2, isr=(2, 3))
    assert elect(not_in_sync, {1, 2, 3}, unclean_allowed=False, settled={1}).state.leader == 2
    result = elect(state, {1, 2, 3}, unclean_allowed=False, settled={1, 2, 3})
    assert (result.state.leader, result.state.leader_epoch, result.why) == (1, 5, Why.PREFERRED)


replica_sets = st.lists(st.integers(1, 6), min_size=1, max_size=5, unique=True).map(tuple)


@given(
    replica_sets,
    st.data(),
    st.sets(st.integers(1, 6)),
    st.booleans(),
)
def test_election_invariants(
    replicas: tuple[int, ...], data: st.DataObject, live: set[int], unclean: bool
) -> None:
    """Whatever the state: the leader is a live replica in the ISR, or there is none;
    the ISR never becomes empty and stays within the replicas; epochs never go back."""
    isr = data.draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True).map(tuple))
    leader = data.draw(st.one_of(st.none(), st.sampled_from(isr)))
    state = Replication(replicas, isr, leader, 3, 5)
    new = elect(state, live, unclean_allowed=unclean, settled=live).state
    assert new.isr
    assert set(new.isr) <= set(replicas)
    assert new.leader_epoch >= state.leader_epoch
    assert new.isr_version >= state.isr_version
    if new.leader is not None:
        assert new.leader in live
        assert new.leader in new.isr
    if new.leader != state.leader:
        assert new.leader_epoch == state.leader_epoch + 1
    if not unclean and new.leader is not None:
        assert new.leader in isr  # a clean election never elects an out-of-sync replica
    if any(r in live and r in isr for r in replicas):
        assert new.leader is not None


def _propose(state: Replication, **overrides: object) -> Replication | None:
    proposal: dict[str, object] = {
        "proposer": 1,
        "leader_epoch": state.leader_epoch,
        "isr_version": state.isr_version,
        "isr": (1, 2),
        "live": {1, 2, 3},
    }
    proposal.update(overrides)
    return commit_proposal(state, **proposal)  # type: ignore[arg-type]


def test_a_current_proposal_is_committed_with_the_next_isr_version() -> None:
    committed = _propose(_state())
    assert committed is not None
    assert (committed.isr, committed.isr_version, committed.leader_epoch) == ((1, 2), 8, 4)
    grown = _propose(_state(isr=(1,)), isr=(3, 1))
    assert grown is not None
    assert grown.isr == (1, 3)


def test_stale_or_invalid_proposals_are_ignored() -> None:
    state = _state()
    assert _propose(state, leader_epoch=3) is None  # a deposed leader's
    assert _propose(state, isr_version=6) is None  # based on an older ISR
    assert _propose(state, proposer=2, isr=(1, 2)) is None  # not the leader
    assert _propose(state, isr=(2, 3)) is None  # without the leader
    assert _propose(state, isr=(1, 4)) is None  # not a replica
    assert _propose(state, isr=(1, 2, 3)) is None  # changes nothing


def test_a_proposal_adding_a_dead_broker_is_answered_with_the_same_isr_at_a_new_version() -> None:
    """The leader waits for a reported addition until a newer ISR version answers it."""
    refused = _propose(_state(isr=(1,)), isr=(1, 2), live={1})
    assert refused is not None
    assert (refused.isr, refused.isr_version, refused.leader_epoch) == ((1,), 8, 4)


def test_a_reassignment_finishes_only_when_every_target_replica_is_in_sync() -> None:
    moving = _state(replicas=(4, 2, 3, 1), isr=(1, 2, 3), leader=1)
    assert finish_reassignment(moving, [4, 2, 3], {1, 2, 3, 4}) is None
    caught_up = _state(replicas=(4, 2, 3, 1), isr=(1, 2, 3, 4), leader=1)
    result = finish_reassignment(caught_up, [4, 2, 3], {1, 2, 3, 4})
    assert result is not None
    assert result.state.replicas == (4, 2, 3)
    assert (result.state.isr, result.state.isr_version) == ((4, 2, 3), 8)
    assert (result.state.leader, result.state.leader_epoch, result.why) == (4, 5, Why.REASSIGNED)
    staying = finish_reassignment(_state(replicas=(4, 2, 3, 1), isr=(1, 2, 3, 4), leader=2),
                                  [4, 2, 3], {1, 2, 3, 4})  # fmt: skip
    assert staying is not None
    assert (staying.state.leader, staying.why) == (2, None)
