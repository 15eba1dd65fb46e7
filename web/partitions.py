"""A topic's partitions as the detail page shows them: where they live (the topic's
assignments, as the REST topic detail serializes them) and their offsets and sizes (on
the leader's disk, and in the object store with tiered storage), asked of each
partition's leader (``DescribeState``, one call per leader broker).

A leader that does not answer leaves its partitions with what the reconciler last
copied from it (end offset and sizes, ``observed``) and no start offset; the page says
so without naming the broker: a tenant never sees broker addresses."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from controlplane.core.errors import DomainError
from controlplane.gateway import admin as brokers
from controlplane.topics.api.serializers import AssignmentSerializer
from controlplane.topics.models import PartitionAssignment, Topic

log = logging.getLogger(__name__)

# Leaders asked at once for one page (a topic's partitions have at most a cluster's
# brokers as leaders).
MAX_PARALLEL_CALLS = 16


@dataclass(frozen=True)
class PartitionRow:
    partition: int
    leader_id: int | None
    replicas: list[int]
    isr: list[int]
    status: str
    start_offset: int | None
    end_offset: int | None
    size_bytes: int | None
    remote_bytes: int  # in the object store (tiered storage)
    live: bool  # offsets and size read from the leader just now


@dataclass(frozen=True)
class TopicSizes:
    """A topic's bytes, summed over its partitions' leaders: on their disks and in the
    object store."""

    local_bytes: int
    remote_bytes: int


def topic_sizes(rows: list[PartitionRow]) -> TopicSizes:
    return TopicSizes(
        local_bytes=sum(r.size_bytes or 0 for r in rows),
        remote_bytes=sum(r.remote_bytes for r in rows),
    )


def partition_rows(topic: Topic) -> list[PartitionRow]:
    assignments = list(topic.assignments.all())
    states = _leader_states(topic, assignments)
    rows = []
    for assignment, data in zip(
        assignments, AssignmentSerializer(assignments, many=True).data, strict=True
    ):
        state = states.get(assignment.partition)
        rows.append(_row(data, state, assignment))
    return rows


def _row(data: Any, state: Any, observed: PartitionAssignment) -> PartitionRow:
    return PartitionRow(
        partition=data["partition"],
        leader_id=data["leader_id"],
        replicas=list(data["replicas"]),
        isr=list(data["isr"]),
        status=data["status"],
        start_offset=state.log_start_offset if state is not None else None,
        end_offset=state.log_end_offset if state is not None else observed.log_end_offset,
        size_bytes=state.size_bytes if state is not None else observed.size_bytes,
        remote_bytes=state.remote_bytes if state is not None else observed.remote_bytes,
        live=state is not None,
    )


def _leader_states(topic: Topic, assignments: list[PartitionAssignment]) -> dict[int, Any]:
    """Partition -> its leader's ``PartitionState``, for the partitions whose leader
    answered. The leaders are asked at once, so a page waits at most one broker
    deadline however many leaders are down."""
    leader_of = {a.partition: a.leader_id for a in assignments if a.leader_id is not None}
    # Addresses are read here: the calls run in threads, which must not touch the
    # database (a thread has its own connection, outside this request's transaction).
    leaders = {a.leader_id: a.leader for a in assignments if a.leader is not None}
    if not leaders:
        return {}
    addresses = [broker.address for broker in leaders.values()]
    with ThreadPoolExecutor(max_workers=min(len(addresses), MAX_PARALLEL_CALLS)) as pool:
        answers = pool.map(lambda address: _describe(address, topic.full_name), addresses)
        states: dict[int, Any] = {}
        for broker_pk, response in zip(leaders, answers, strict=True):
            for state in response.partitions if response is not None else ():
                if state.topic == topic.full_name and leader_of.get(state.partition) == broker_pk:
                    states[state.partition] = state
    return states


def _describe(address: str, full_name: str) -> Any:
    """The broker's ``DescribeState`` of the topic, or None when it does not answer."""
    try:
        return brokers.describe_state(address, [full_name])
    except DomainError as exc:
        log.info("topic page: a broker did not describe %s: %s", full_name, exc)
        return None
