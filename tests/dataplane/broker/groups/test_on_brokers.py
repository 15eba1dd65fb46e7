"""Consumer groups on real broker processes (``tests/support/brokers.py``): a member
killed with SIGKILL, a coordinator broker killed and restarted, groups spread over a
three-broker cluster."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dataplane.client import Admin
from dataplane.client.connection import ConnectionPool
from dataplane.client.coordinator import CoordinatorLink, describe_group
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import TopicPartition
from tests.support.brokers import REPO_ROOT, BrokerProcess

from .member_process import COMMITTED_OFFSET
from .members import Runner, settled
from .support import wait_for

TOPIC = "test.groups"


def create_topic(address: str, partitions: int) -> set[TopicPartition]:
    with Admin(address) as admin:
        admin.create_topic(TOPIC, partitions, {"durability": "never"})
    return {TopicPartition(TOPIC, p) for p in range(partitions)}


@pytest.fixture
def connect() -> Iterator[Callable[[str], ClusterMetadata]]:
    pools: list[ConnectionPool] = []

    def make(address: str) -> ClusterMetadata:
        pools.append(ConnectionPool(address))
        return ClusterMetadata(pools[-1], timeout_s=5)

    yield make
    for pool in pools:
        pool.close()


@pytest.fixture
def runners() -> Iterator[Callable[..., Runner]]:
    started: list[Runner] = []

    def start(metadata: ClusterMetadata, name: str, **settings: Any) -> Runner:
        started.append(Runner(metadata, name, [TOPIC], **settings).start())
        return started[-1]

    yield start
    for runner in started:
        runner.stop()
        assert not runner.listener.errors, runner.listener.errors


def assignment_lines(process: subprocess.Popen[bytes]) -> Iterator[set[TopicPartition]]:
    assert process.stdout is not None
    while select.select([process.stdout], [], [], 30)[0]:
        line = process.stdout.readline()
        if not line:
            return
        yield {TopicPartition(t, p) for t, p in json.loads(line)}


def test_a_killed_member_s_partitions_go_to_the_others_with_their_commits(
    broker: BrokerProcess,
    connect: Callable[[str], ClusterMetadata],
    runners: Callable[..., Runner],
) -> None:
    everything = create_topic(broker.address, 4)
    command = [sys.executable, "-m", "tests.dataplane.broker.groups.member_process"]
    doomed = subprocess.Popen(
        [*command, broker.address, "g", TOPIC, "1500"], stdout=subprocess.PIPE, cwd=REPO_ROOT
    )
    try:
        lines = assignment_lines(doomed)
        assert next(lines) == everything
        survivor = runners(
            connect(broker.address), "survivor", group_id="g", session_timeout_ms=1500
        )
        held = next(held for held in lines if held and held != everything)
        assert wait_for(lambda: survivor.assignment == everything - held)
    finally:
        doomed.kill()  # SIGKILL: no LeaveGroup, no more heartbeats
        doomed.wait()
    assert wait_for(lambda: settled(survivor, expect=everything), timeout_s=20)
    assert survivor.member.committed(held) == dict.fromkeys(held, COMMITTED_OFFSET)


def test_commits_and_members_survive_a_killed_coordinator(
    broker: BrokerProcess,
    connect: Callable[[str], ClusterMetadata],
    runners: Callable[..., Runner],
) -> None:
    everything = create_topic(broker.address, 3)
    metadata = connect(broker.address)
    a = runners(metadata, "a", group_id="g", session_timeout_ms=6000)
    b = runners(metadata, "b", group_id="g", session_timeout_ms=6000)
    assert wait_for(lambda: settled(a, b, expect=everything), timeout_s=20)
    a.member.commit(dict.fromkeys(a.assignment, 11))
    broker.restart()  # SIGKILL, then start on the same port and data
    assert wait_for(lambda: settled(a, b, expect=everything), timeout_s=20)
    assert a.member.committed(a.assignment) == dict.fromkeys(a.assignment, 11)
    b.member.commit(dict.fromkeys(b.assignment, 12))
    described = describe_group(metadata, "g")
    assert described.state == "Stable"
    assert {m.client_id for m in described.members} == {"a", "b"}
    assert described.committed == {
        **dict.fromkeys(a.assignment, 11),
        **dict.fromkeys(b.assignment, 12),
    }


def test_groups_spread_over_a_cluster(
    cluster: list[BrokerProcess],
    connect: Callable[[str], ClusterMetadata],
    runners: Callable[..., Runner],
    tmp_path: Path,
) -> None:
    everything = create_topic(cluster[0].address, 6)
    metadata = connect(cluster[0].address)
    coordinators = {
        group: CoordinatorLink(metadata, group).coordinator().address
        for group in (f"group-{i}" for i in range(12))
    }
    assert len(set(coordinators.values())) == 3  # every broker coordinates some groups
    first, second = (
        "group-0",
        next(g for g, a in coordinators.items() if a != coordinators["group-0"]),
    )
    members = {
        group: [
            runners(metadata, f"{group}-{i}", group_id=group, session_timeout_ms=6000)
            for i in range(2)
        ]
        for group in (first, second)
    }
    for group_members in members.values():
        assert wait_for(lambda m=group_members: settled(*m, expect=everything), timeout_s=20)
        group_members[0].member.commit(dict.fromkeys(group_members[0].assignment, 5))
    victim = next(b for b in cluster if b.address == coordinators[first])
    victim.restart()
    for group_members in members.values():
        assert wait_for(lambda m=group_members: settled(*m, expect=everything), timeout_s=30)
        owned = group_members[0].assignment
        assert group_members[1].member.committed(owned) == dict.fromkeys(owned, 5)
