"""Assignors: Kafka's examples, and properties (completeness, no double assignment,
balance, stickiness, two-round cooperative convergence) over random groups."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.client.assignors import (
    ASSIGNORS,
    COOPERATIVE_STICKY,
    Assignment,
    RebalanceProtocol,
    Subscription,
    cooperative_sticky_assign,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
    rebalance_protocol,
    roundrobin_assign,
    sticky_assign,
)
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError

TP = TopicPartition
EXAMPLES = int(os.environ.get("MERIDIAN_PROPERTY_EXAMPLES", "100"))
TOPICS = ["t0", "t1", "t2", "t3"]

counts_st = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1)
members_st = st.lists(
    st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=8, unique=True
)


@st.composite
def groups(
    draw: st.DrawFn, *, same_topics: bool = False
) -> tuple[dict[str, Subscription], dict[str, int]]:
    counts = draw(counts_st)
    members = draw(members_st)
    shared = tuple(draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)))
    subscriptions = {
        m: Subscription(
            shared if same_topics else tuple(draw(st.lists(st.sampled_from(TOPICS), unique=True)))
        )
        for m in members
    }
    return subscriptions, counts


def all_partitions(subscriptions: Mapping[str, Subscription], counts: Mapping[str, int]) -> set[TP]:
    topics = {t for s in subscriptions.values() for t in s.topics} & set(counts)
    return {TP(t, p) for t in topics for p in range(counts[t])}


def check_valid(
    subscriptions: Mapping[str, Subscription], counts: Mapping[str, int], result: Assignment
) -> None:
    assert set(result) == set(subscriptions)
    handed = Counter(tp for tps in result.values() for tp in tps)
    assert all(n == 1 for n in handed.values()), "a partition went to two members"
    for member, tps in result.items():
        assert all(tp.topic in subscriptions[member].topics for tp in tps)
        assert all(0 <= tp.partition < counts[tp.topic] for tp in tps)


def check_balanced(subscriptions: Mapping[str, Subscription], result: Assignment) -> None:
    """No partition could move to an eligible member with two fewer partitions."""
    sizes = {m: len(tps) for m, tps in result.items()}
    for member, tps in result.items():
        for tp in tps:
            for other, sub in subscriptions.items():
                assert not (tp.topic in sub.topics and sizes[member] - sizes[other] >= 2), (
                    f"{tp} could move from {member} ({sizes[member]}) to {other} ({sizes[other]})"
                )


def with_owned(
    subscriptions: Mapping[str, Subscription], owned: Assignment, generation: int = 1
) -> dict[str, Subscription]:
    return {
        m: Subscription(s.topics, tuple(owned.get(m, ())), generation)
        for m, s in subscriptions.items()
    }


# -- Kafka's examples -------------------------------------------------------------------


def test_range_gives_ranges_per_topic() -> None:
    subs = {"c0": Subscription(("t0", "t1")), "c1": Subscription(("t0", "t1"))}
    assert range_assign(subs, {"t0": 3, "t1": 3}) == {
        "c0": [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)],
        "c1": [TP("t0", 2), TP("t1", 2)],
    }


def test_roundrobin_deals_partitions_in_turn() -> None:
    subs = {"c0": Subscription(("t0", "t1")), "c1": Subscription(("t0", "t1"))}
    assert roundrobin_assign(subs, {"t0": 3, "t1": 3}) == {
        "c0": [TP("t0", 0), TP("t0", 2), TP("t1", 1)],
        "c1": [TP("t0", 1), TP("t1", 0), TP("t1", 2)],
    }


def test_roundrobin_skips_members_not_subscribed() -> None:
    subs = {
        "c0": Subscription(("t0",)),
        "c1": Subscription(("t0", "t1")),
        "c2": Subscription(("t0", "t1", "t2")),
    }
    result = roundrobin_assign(subs, {"t0": 1, "t1": 2, "t2": 3})
    assert result == {
        "c0": [TP("t0", 0)],
        "c1": [TP("t1", 0)],
        "c2": [TP("t1", 1), TP("t2", 0), TP("t2", 1), TP("t2", 2)],
    }


def test_range_orders_static_members_by_instance_id() -> None:
    subs = {
        "b-1": Subscription(("t",), group_instance_id="host-a"),
        "a-1": Subscription(("t",), group_instance_id="host-b"),
    }
    assert range_assign(subs, {"t": 2}) == {"b-1": [TP("t", 0)], "a-1": [TP("t", 1)]}


def test_cooperative_holds_back_what_another_member_owns() -> None:
    owned = {"a": [TP("t", p) for p in range(4)]}
    subs = with_owned({"a": Subscription(("t",)), "b": Subscription(("t",))}, owned)
    first = cooperative_sticky_assign(subs, {"t": 4})
    assert len(first["a"]) == 2
    assert first["b"] == []  # a must revoke the two it gives up first
    second = cooperative_sticky_assign(with_owned(subs, first), {"t": 4})
    assert second["a"] == first["a"]
    assert sorted(second["b"]) == sorted(set(owned["a"]) - set(first["a"]))


def test_rebalance_protocol_is_cooperative_only_when_every_assignor_is() -> None:
    assert rebalance_protocol([COOPERATIVE_STICKY]) is RebalanceProtocol.COOPERATIVE
    assert rebalance_protocol(["range", COOPERATIVE_STICKY]) is RebalanceProtocol.EAGER
    with pytest.raises(MeridianError) as info:
        rebalance_protocol(["sticky-ish"])
    assert info.value.code == ErrorCode.INVALID_CONFIG


def test_payloads_round_trip() -> None:
    sub = Subscription(("a", "b"), (TP("a", 1),), 7, b"u", "host")
    assert decode_subscription(encode_subscription(sub), "host") == sub
    assert decode_assignment(encode_assignment([TP("a", 2), TP("b", 0)])) == {
        TP("a", 2),
        TP("b", 0),
    }
    with pytest.raises(MeridianError):
        decode_assignment(b"\xff\xff")


# -- properties -------------------------------------------------------------------------


@settings(max_examples=EXAMPLES, deadline=None)
@given(groups(), st.sampled_from(sorted(ASSIGNORS)))
def test_every_assignor_is_valid_and_complete(
    group: tuple[dict[str, Subscription], dict[str, int]], name: str
) -> None:
    subscriptions, counts = group
    result = ASSIGNORS[name].assign(subscriptions, counts)
    check_valid(subscriptions, counts, result)
    assert {tp for tps in result.values() for tp in tps} == all_partitions(subscriptions, counts)


@settings(max_examples=EXAMPLES, deadline=None)
@given(groups(same_topics=True), st.sampled_from(["roundrobin", COOPERATIVE_STICKY]))
def test_identical_subscriptions_differ_by_at_most_one(
    group: tuple[dict[str, Subscription], dict[str, int]], name: str
) -> None:
    subscriptions, counts = group
    sizes = [len(tps) for tps in ASSIGNORS[name].assign(subscriptions, counts).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=EXAMPLES, deadline=None)
@given(groups(), st.data())
def test_sticky_is_balanced_from_any_owned_state(
    group: tuple[dict[str, Subscription], dict[str, int]], data: st.DataObject
) -> None:
    """Owned partitions may be stale, contested or of unsubscribed topics."""
    subscriptions, counts = group
    universe = sorted({TP(t, p) for t in TOPICS for p in range(14)})
    owned = {
        m: data.draw(st.lists(st.sampled_from(universe), max_size=8, unique=True))
        for m in subscriptions
    }
    generations = {m: data.draw(st.integers(-1, 3)) for m in subscriptions}
    subs = {
        m: Subscription(s.topics, tuple(owned[m]), generations[m]) for m, s in subscriptions.items()
    }
    result = sticky_assign(subs, counts)
    check_valid(subs, counts, result)
    assert {tp for tps in result.values() for tp in tps} == all_partitions(subs, counts)
    check_balanced(subs, result)


@settings(max_examples=EXAMPLES, deadline=None)
@given(groups(same_topics=True), st.data())
def test_sticky_keeps_owned_partitions_when_members_come_and_go(
    group: tuple[dict[str, Subscription], dict[str, int]], data: st.DataObject
) -> None:
    subscriptions, counts = group
    before = data.draw(st.lists(st.sampled_from(sorted(subscriptions)), min_size=1, unique=True))
    previous = sticky_assign({m: subscriptions[m] for m in before}, counts)
    result = sticky_assign(with_owned(subscriptions, previous), counts)
    floor = len(all_partitions(subscriptions, counts)) // len(subscriptions)
    for member, owned in previous.items():
        kept = set(owned) & set(result[member])
        assert len(kept) >= min(len(owned), floor), f"{member} kept {len(kept)} of {len(owned)}"
    unchanged = sticky_assign(with_owned(subscriptions, result, 2), counts)
    assert unchanged == result  # a stable group keeps its assignment


def cooperative_rounds(
    subscriptions: Mapping[str, Subscription], counts: Mapping[str, int], owned: Assignment
) -> tuple[int, Assignment]:
    """Rebalance until nothing is held back: each round's owners revoke what moved.

    Returns the number of rounds and the final assignment; checks every round."""
    for rounds in range(1, 3 * len(subscriptions) + 3):
        result = cooperative_sticky_assign(with_owned(subscriptions, owned, rounds), counts)
        check_valid(subscriptions, counts, result)
        for member, tps in result.items():
            assert not any(tp in held for tp in tps for m, held in owned.items() if m != member)
        if {tp for tps in result.values() for tp in tps} == all_partitions(subscriptions, counts):
            return rounds, result
        owned = result
    raise AssertionError("cooperative rebalancing did not converge")


@settings(max_examples=EXAMPLES, deadline=None)
@given(groups(same_topics=True), st.data())
def test_cooperative_converges_in_two_rounds(
    group: tuple[dict[str, Subscription], dict[str, int]], data: st.DataObject
) -> None:
    """With identical subscriptions, round one never hands out a partition someone else
    owns, and after the owners revoke, round two assigns everything, balanced."""
    subscriptions, counts = group
    before = data.draw(st.lists(st.sampled_from(sorted(subscriptions)), min_size=1, unique=True))
    previous = cooperative_sticky_assign({m: subscriptions[m] for m in before}, counts)
    rounds, final = cooperative_rounds(subscriptions, counts, previous)
    assert rounds <= 2
    check_balanced(subscriptions, final)


@settings(max_examples=EXAMPLES, deadline=None)
@given(groups(), st.data())
def test_cooperative_converges_with_any_subscriptions(
    group: tuple[dict[str, Subscription], dict[str, int]], data: st.DataObject
) -> None:
    subscriptions, counts = group
    before = data.draw(st.lists(st.sampled_from(sorted(subscriptions)), min_size=1, unique=True))
    previous = cooperative_sticky_assign({m: subscriptions[m] for m in before}, counts)
    _rounds, final = cooperative_rounds(subscriptions, counts, previous)
    check_balanced(subscriptions, final)
