"""Mirror links end to end: two regions, each with its brokers and controller, the
controllers running the workers. Records are sent while workers and brokers of either
region are killed or stopped; then every record is in each region exactly once, in its
origin's order per partition, never copied back to its origin; groups fail over with
the counts the failover promises; a link whose source region is down is degraded, with
its lag, and recovers."""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from controlplane.core.actors import Actor
from controlplane.groups.services import GroupActive
from controlplane.mirrors import services as mirror_services
from controlplane.mirrors.choices import MirrorHealth, WorkerPhase
from controlplane.mirrors.failover import FailoverResult, failover_group
from controlplane.mirrors.models import MirrorLink
from controlplane.topics.models import Topic
from dataplane.client import Consumer, Producer, TopicPartition
from tests.integration.mirror.conftest import (
    PARTITIONS,
    Copy,
    TwoRegions,
    caught_up,
    copy_of,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ACTOR = Actor.system("mirror-test")
CHUNK = 60  # records per region between two faults


def send(regions: TwoRegions, region: str, topic: str, count: int, start: int) -> list[bytes]:
    """``count`` records to ``topic`` in ``region`` (partition i mod 3), acknowledged."""
    with regions.producer(region) as producer:
        return send_with(producer, region, topic, count, start)


def send_with(producer: Producer, region: str, topic: str, count: int, start: int) -> list[bytes]:
    values = [f"{region}-{i}".encode() for i in range(start, start + count)]
    futures = [
        producer.send(topic, v, partition=i % PARTITIONS) for i, v in enumerate(values, start)
    ]
    producer.flush(60)
    for future in futures:
        future.result(timeout=60)
    return values


def during(actions: Iterable[Callable[[], None]], produce: Callable[[int], None]) -> None:
    """Produce a chunk, do one fault, produce the next chunk... (one chunk after the
    last fault), so each fault strikes while the workers have records to copy."""
    produce(0)
    for n, action in enumerate(actions, 1):
        action()
        produce(n)


def kill_worker(regions: TwoRegions, link: MirrorLink, to_region: str, sig: int) -> None:
    """Send ``sig`` to the leg's worker; return once the controller runs a new one."""
    worker = regions.worker(link, to_region)
    assert worker.pid is not None
    os.kill(worker.pid, sig)
    wait_until(
        lambda: (
            regions.worker(link, to_region).generation > worker.generation
            and any(w.to_region.name == to_region for w in regions.running_workers(link))
        ),
        30,
        f"the worker in {to_region} replaced after signal {sig}",
    )
    if sig == signal.SIGSTOP:  # fenced: the stopped process was killed first
        assert not _exists(worker.pid)


def kill_broker(
    regions: TwoRegions, region: str, broker_id: int, sig: int = signal.SIGKILL
) -> None:
    """Send ``sig`` to a broker (SIGKILL: the controller restarts it; SIGSTOP: it hangs,
    and the controller moves its leaderships, until SIGCONT)."""
    pid = regions[region].pid(broker_id)
    assert pid is not None
    os.kill(pid, sig)


def _exists(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def check_region(copies: list[Copy], region: str, sent: dict[str, list[bytes]]) -> None:
    """Every record sent in any region is in ``region`` exactly once; its own records
    carry no provenance (none was copied back); copies carry their origin, and each
    origin's records keep their order per partition."""
    expected = Counter(v for values in sent.values() for v in values)
    assert Counter(c.value for c in copies) == expected
    for copy in copies:
        origin = copy.value.split(b"-")[0].decode()
        if origin == region:
            assert copy.origin_region is None, copy
        else:
            assert (copy.origin_region, copy.origin_offset is None) == (origin, False), copy
    for partition in range(PARTITIONS):
        for origin in sent:
            seq = [
                int(c.value.split(b"-")[1])
                for c in sorted(copies, key=lambda c: c.offset)
                if c.partition == partition and c.value.startswith(origin.encode() + b"-")
            ]
            assert seq == sorted(seq), f"{origin}'s order in partition {partition} of {region}"


def check_offsets(origin: list[Copy], copies: list[Copy], from_region: str) -> None:
    """Each copy's x-origin-offset is its record's offset in the origin region."""
    at = {(c.partition, c.value): c.offset for c in origin if c.origin_region is None}
    for copy in copies:
        if copy.origin_region == from_region:
            assert copy.origin_offset == at[(copy.partition, copy.value)], copy


# -- consumer groups -----------------------------------------------------------------------


def commit_part(
    regions: TwoRegions, region: str, topic: str, group: str, records: list[Copy]
) -> list[Copy]:
    """``group`` commits in ``region`` as if it had read a different share of each
    partition (a third, a half, two thirds: mid-partition, where the regions' orders
    differ); returns the records it has so consumed."""
    ends = regions.end_offsets(region, topic)
    offsets = {p: ends[p] * (p + 1) // (PARTITIONS + 1) for p in range(PARTITIONS)}
    with Consumer(regions.bootstrap(region), group_id=group, enable_auto_commit=False) as c:
        c.commit({TopicPartition(topic, p): o for p, o in offsets.items()})
    return [r for r in records if r.offset < offsets[r.partition]]


def consume_rest(regions: TwoRegions, region: str, topic: str, group: str) -> list[Copy]:
    """A member of ``group`` in ``region`` reads from the committed offsets to the end."""
    ends = regions.end_offsets(region, topic)
    consumer = Consumer(
        regions.bootstrap(region),
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",  # a partition never committed: nothing read yet
        session_timeout_ms=6_000,
        heartbeat_interval_ms=1_000,
    )
    got: list[Copy] = []
    try:
        consumer.subscribe([topic])
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

        def done() -> bool:
            got.extend(_copies(consumer.poll(300)))
            assigned = consumer.assignment()
            return len(assigned) == PARTITIONS and all(
                consumer.position(tp) >= ends[tp.partition] for tp in tps
            )

        wait_until(done, 60, f"{group} reads to the end in {region}")
    finally:
        consumer.close(commit=False)
    return got


def _copies(records: Iterable[object]) -> list[Copy]:
    return [copy_of(r) for r in records]


def fail_over(link: MirrorLink, group: str, to_region: str) -> FailoverResult:
    return failover_group(MirrorLink.objects.get(pk=link.pk), group, to_region, actor=ACTOR)


# -- the tests -----------------------------------------------------------------------------


def test_one_way_copies_exactly_once_fails_a_group_over_exactly_and_degrades_without_its_source(
    regions: TwoRegions,
) -> None:
    topic = regions.create_topic("orders").full_name
    link = regions.create_link("orders-west", "orders", direction="one-way")
    sent: dict[str, list[bytes]] = {"east": []}

    def produce(n: int) -> None:
        sent["east"] += send(regions, "east", topic, CHUNK, n * CHUNK)

    during(
        [
            lambda: kill_worker(regions, link, "west", signal.SIGKILL),
            lambda: kill_worker(regions, link, "west", signal.SIGSTOP),
            lambda: kill_broker(regions, "east", 2),
            lambda: kill_broker(regions, "west", 3),
            lambda: kill_broker(regions, "west", 1, signal.SIGSTOP),
            lambda: kill_broker(regions, "west", 1, signal.SIGCONT),
        ],
        produce,
    )
    total = len(sent["east"])
    assert total == 7 * CHUNK
    regions.wait_copied(link, {"west": total}, topic)
    east, west = regions.read_all("east", topic), regions.read_all("west", topic)
    check_region(east, "east", sent)
    check_region(west, "west", sent)
    check_offsets(east, west, "east")

    # A group half-way through in east resumes in west with nothing skipped or repeated.
    group = "acme.billing"
    before = commit_part(regions, "east", topic, group, east)
    with Consumer(regions.bootstrap("west"), group_id=group, session_timeout_ms=6_000) as c:
        c.subscribe([topic])  # a live member in west: its next commit would undo the move
        wait_until(lambda: c.poll(200) is not None and c.assignment(), 30, "a member in west")
        with pytest.raises(GroupActive):
            fail_over(link, group, "west")
    answer = fail_over(link, group, "west")
    assert all(p.exact and p.may_repeat == 0 for p in answer.partitions), answer
    after = consume_rest(regions, "west", topic, group)
    assert Counter(c.value for c in before) + Counter(c.value for c in after) == Counter(
        sent["east"]
    )

    # The source region down (its controller stopped, so nothing restarts its brokers):
    # the link is degraded with its lag; back up, it recovers and copies what it missed.
    regions["east"].stop_controller()
    late = send(regions, "east", topic, CHUNK, 10_000)
    regions["east"].stop_brokers()
    wait_until(lambda: _link(link).health == MirrorHealth.DEGRADED, 60, "degraded")
    degraded = _link(link)
    assert degraded.health_reason
    wait_until(lambda: any(p.lag_seconds > 0 for p in _link(link).partitions.all()), 30, "lag")
    regions["east"].controller = regions["east"]._start_controller()
    wait_until(lambda: _link(link).health == MirrorHealth.OK, 90, "healthy again")
    sent["east"] += late
    regions.wait_copied(link, {"west": total + CHUNK}, topic)
    check_region(regions.read_all("west", topic), "west", sent)

    # Paused, the worker stops; resumed, it copies what came meanwhile, once.
    pid = regions.worker(link, "west").pid
    mirror_services.update_link(_link(link), paused=True, actor=ACTOR)
    wait_until(lambda: regions.worker(link, "west").phase == WorkerPhase.STOPPED, 30, "stopped")
    assert pid is not None
    assert not _exists(pid)
    sent["east"] += send(regions, "east", topic, CHUNK, 20_000)
    mirror_services.update_link(_link(link), paused=False, actor=ACTOR)
    regions.wait_copied(link, {"west": total + 2 * CHUNK}, topic)
    check_region(regions.read_all("west", topic), "west", sent)

    # Deleted: its worker stops, the link goes, the copy and its records stay.
    pid = regions.worker(link, "west").pid
    mirror_services.delete_link(_link(link), actor=ACTOR)
    wait_until(lambda: not MirrorLink.objects.filter(pk=link.pk).exists(), 30, "link deleted")
    assert pid is not None
    assert not _exists(pid)
    copy = Topic.objects.get(full_name=topic, cluster__region__name="west")
    assert (copy.mirror_link_id, copy.mirror_of_id is not None) == (None, True)
    check_region(regions.read_all("west", topic), "west", sent)


def test_two_way_copies_both_ways_exactly_once_and_fails_groups_over_both_ways(
    regions: TwoRegions,
) -> None:
    topic = regions.create_topic("payments").full_name
    link = regions.create_link("payments-both", "payments", direction="two-way")
    sent: dict[str, list[bytes]] = {"east": [], "west": []}

    def produce(n: int) -> None:  # both regions at once
        # Made here: their bootstrap is read from the database, which the threads never use.
        producers = {r: regions.producer(r) for r in ("east", "west")}
        threads = [
            threading.Thread(
                target=lambda r=r: sent[r].extend(
                    send_with(producers[r], r, topic, CHUNK, n * CHUNK)
                )
            )
            for r in producers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for producer in producers.values():
            producer.close()

    during(
        [
            lambda: kill_worker(regions, link, "east", signal.SIGKILL),
            lambda: kill_worker(regions, link, "west", signal.SIGSTOP),
            lambda: kill_broker(regions, "west", 1),
            lambda: kill_broker(regions, "east", 3),
            lambda: kill_broker(regions, "east", 2, signal.SIGSTOP),
            lambda: kill_broker(regions, "east", 2, signal.SIGCONT),
        ],
        produce,
    )
    total = len(sent["east"]) + len(sent["west"])
    regions.wait_copied(link, {"east": total, "west": total}, topic)
    east, west = regions.read_all("east", topic), regions.read_all("west", topic)
    check_region(east, "east", sent)
    check_region(west, "west", sent)
    check_offsets(east, west, "east")
    check_offsets(west, east, "west")

    # east -> west, then back: nothing skipped; repeats exactly as the answer counts.
    everything = Counter(v for values in sent.values() for v in values)
    read = {"east": east, "west": west}
    for group, (here, there) in {
        "acme.ledger": ("east", "west"),
        "acme.audit": ("west", "east"),
    }.items():
        before = commit_part(regions, here, topic, group, read[here])
        answer = fail_over(link, group, there)
        after = consume_rest(regions, there, topic, group)
        seen = Counter(c.value for c in before) + Counter(c.value for c in after)
        assert set(seen) == set(everything), f"{group}: records skipped"
        consumed = {c.value for c in before}
        repeats = Counter(c.partition for c in after if c.value in consumed)
        counted = {p.partition: p.may_repeat for p in answer.partitions if p.may_repeat}
        assert dict(repeats) == counted, answer
        print(f"{group} {here} -> {there}: {repeats.total()} record(s) of {total} read twice")
    assert caught_up(link)


def _link(link: MirrorLink) -> MirrorLink:
    return MirrorLink.objects.get(pk=link.pk)
