"""Two workers in opposite directions on the same topic, producers on both sides at
once: each region ends with every record once, each origin's order kept, nothing
copied back to where it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mirror.support import Background, assert_copied_exactly, local_records
from tests.support.mirror import Region, WorkerProcess, link_config, origin_of, read_all

TOPIC = "acme.orders"
PARTITIONS = 2


@pytest.mark.slow
def test_two_way_copies_each_record_once_per_region_and_never_back(
    regions: tuple[Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    east, west = regions
    for region in regions:
        region.create_topic(TOPIC, PARTITIONS)
    to_west = WorkerProcess(tmp_path / "to-west", link_config(east, west, {TOPIC: PARTITIONS}))
    to_east = WorkerProcess(tmp_path / "to-east", link_config(west, east, {TOPIC: PARTITIONS}))
    workers.extend([to_west, to_east])
    with (
        Background(east.bootstrap, TOPIC, PARTITIONS, "east", 0) as from_east,
        Background(west.bootstrap, TOPIC, PARTITIONS, "west", 0) as from_west,
    ):
        to_west.start()
        to_east.start()
        to_west.wait_for(lambda s: sum(p["copied_records"] for p in s["partitions"]) > 1000)
        to_east.kill()  # one direction restarts mid-copy
        to_east.start()
        to_east.wait_for(lambda s: sum(p["copied_records"] for p in s["partitions"]) > 1000)
    # both sides quiet: each worker catches up with the other's last copies too
    for _ in range(2):
        to_west.wait_caught_up()
        to_east.wait_caught_up()
    in_east = read_all(east.bootstrap, TOPIC, PARTITIONS)
    in_west = read_all(west.bootstrap, TOPIC, PARTITIONS)
    east_local, west_local = local_records(in_east), local_records(in_west)
    assert sum(map(len, east_local.values())) == from_east.next
    assert sum(map(len, west_local.values())) == from_west.next
    assert assert_copied_exactly(east_local, in_west, "east") == from_east.next
    assert assert_copied_exactly(west_local, in_east, "west") == from_west.next
    for here, records in (("east", in_east), ("west", in_west)):
        assert not [r for rs in records.values() for r in rs if origin_of(r)[0] == here]
        assert sum(map(len, records.values())) == from_east.next + from_west.next
    skipped = sum(p["skipped_records"] for p in to_west.status()["partitions"])
    assert skipped == sum(map(len, in_east.values())) - from_east.next  # west's copies, passed over
