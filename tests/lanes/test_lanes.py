"""The lanes library against a plain oracle: name rules, derived names, headers and the
routing order, checked over generated inputs."""

from __future__ import annotations

import itertools
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

import lanes
from lanes import LaneSpec, OrphanPolicy

ALPHABET = string.ascii_lowercase + string.digits + "-"


def oracle_valid(name: str) -> bool:
    """The rule, spelled out character by character."""
    if not 3 <= len(name) <= 32:
        return False
    if name[0] not in string.ascii_lowercase:
        return False
    if name[-1] not in string.ascii_lowercase + string.digits:
        return False
    if any(c not in ALPHABET for c in name):
        return False
    return all(not (a == "-" and b == "-") for a, b in itertools.pairwise(name))


def oracle_lane(
    explicit: str | None,
    headers: list[tuple[str, bytes | None]],
    configured: str | None,
    current: str | None,
) -> str | None:
    if explicit is not None:
        return explicit
    named = [v for k, v in headers if k == "x-lane"]
    if named:
        return (named[-1] or b"").decode()
    if configured is not None:
        return configured
    return current


names = st.text(alphabet=ALPHABET + "_A~. ", max_size=36)
valid_names = st.from_regex(r"[a-z][a-z0-9-]{1,30}[a-z0-9]", fullmatch=True).filter(oracle_valid)
maybe_lane = st.none() | st.sampled_from(["ppe", "boe-alice", "qa-1"])
header_lists = st.lists(
    st.tuples(st.sampled_from(["x-lane", "trace", "x-other"]), st.sampled_from([b"ppe", b"qat"])),
    max_size=4,
)


@given(names)
def test_check_lane_name_follows_the_rule(name: str) -> None:
    if oracle_valid(name):
        assert lanes.check_lane_name(name) == name
    else:
        with pytest.raises(lanes.InvalidLaneNameError):
            lanes.check_lane_name(name)


def test_invalid_lane_names_are_value_errors() -> None:
    for bad in ("", "ab", "Ppe", "a--b", "-ab", "ab-", "1ab", "a_b", "x" * 33):
        with pytest.raises(ValueError, match="invalid lane name"):
            lanes.check_lane_name(bad)


@given(valid_names)
def test_lane_topics_and_groups_split_back(lane: str) -> None:
    topic = lanes.lane_topic("acme.orders", lane)
    assert topic == f"acme.orders~{lane}"
    assert lanes.split_topic(topic) == ("acme.orders", lane)
    assert lanes.is_lane_topic(topic)
    assert not lanes.is_lane_topic("acme.orders")
    group = lanes.lane_group("billing", lane)
    assert lanes.split_group(group) == ("billing", lane)
    assert lanes.trunk_group(group) == lanes.trunk_group("billing") == "billing"
    with pytest.raises(ValueError, match="already"):
        lanes.lane_topic(topic, lane)


@given(maybe_lane, header_lists, maybe_lane, maybe_lane)
def test_lane_for_record_follows_the_routing_order(
    explicit: str | None,
    headers: list[tuple[str, bytes | None]],
    configured: str | None,
    current: str | None,
) -> None:
    with lanes.processing_lane(current):
        got = lanes.lane_for_record(explicit=explicit, headers=headers, configured=configured)
    assert got == oracle_lane(explicit, headers, configured, current)
    assert lanes.current_lane.get() is None  # the block restored it


@given(header_lists, valid_names)
def test_with_lane_header_leaves_exactly_one_x_lane(
    headers: list[tuple[str, bytes | None]], lane: str
) -> None:
    out = lanes.with_lane_header(headers, lane)
    assert [v for k, v in out if k == "x-lane"] == [lane.encode()]
    assert [h for h in out if h[0] != "x-lane"] == [h for h in headers if h[0] != "x-lane"]
    if [v for k, v in headers if k == "x-lane"] == [lane.encode()]:
        assert out == headers  # already right: untouched, not duplicated


def test_orphans_and_subscriptions_of_a_lane_spec() -> None:
    spec = LaneSpec("acme", "ppe", all_topics=False, topics=frozenset({"acme.orders"}))
    assert spec.covers("acme.orders")
    assert not spec.covers("acme.invoices")
    assert not spec.covers("other.orders")
    assert spec.orphaned_to_trunk("acme.orders")
    live = LaneSpec("acme", "ppe", live_topics=frozenset({"acme.orders"}))
    assert not live.orphaned_to_trunk("acme.orders")
    hold = LaneSpec("acme", "ppe", orphan_policy=OrphanPolicy.HOLD)
    assert not hold.orphaned_to_trunk("acme.orders")
    assert spec.subscriptions(["acme.orders"]) == ["acme.orders~ppe"]
    both = LaneSpec("acme", "ppe", consume_trunk=True)
    assert both.subscriptions(["acme.orders"]) == ["acme.orders~ppe", "acme.orders"]
