"""``./dev run --regions``: distinct lowercase slugs, the first the home; every other
region's name must leave room for the demo's mirror link to it (``orders-<region>``, a
link name of at most 32 characters), refused up front with a clear message."""

from __future__ import annotations

import argparse

import pytest

from controlplane.demo import MAX_LINK_NAME, link_name, region_names


def test_region_names_are_distinct_slugs_the_first_the_home() -> None:
    assert region_names("east, west,eu-central-1") == ["east", "west", "eu-central-1"]
    for bad in ("East,west", "east,east", "east,,west"):
        with pytest.raises(argparse.ArgumentTypeError):
            region_names(bad)


def test_a_region_too_long_for_its_mirror_link_is_refused_with_the_limit() -> None:
    room = MAX_LINK_NAME - len(link_name(""))
    longest = "w" * room
    assert region_names(f"east,{longest}") == ["east", longest]
    assert len(link_name(longest)) == MAX_LINK_NAME
    with pytest.raises(argparse.ArgumentTypeError, match=f"at most {room}"):
        region_names(f"east,{longest}w")
    home = "h" * 32  # the home region has no link to it: only the region limit applies
    assert region_names(f"{home},west") == [home, "west"]
