"""A topic's partitions as the detail page shows them: where they live (the topic's
assignments, as the REST topic detail serializes them) and their offsets and size, asked
of each partition's leader (``DescribeState``, one call per leader broker).

A leader that does not answer leaves its partitions with what the reconciler last
copied from it (end offset and size, ``observed``) and no start offset; the page says
so without naming the broker: a tenant never sees broker addresses."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from controlplane.core.errors import DomainError
from controlplane.gateway import admin as brokers
from controlplane.topics.api.serializers import AssignmentSerializer
from controlplane.topics.models import PartitionAssignment, Topic

log = logging.getLogger(__name__)


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
    live: bool  # offsets and size read from the leader just now


def partition_rows(topic: Topic) -> list[PartitionRow]:
    assignments = list(topic.assignments.all())
    states = _leader_states(topic, assignments)
    rows = []
    for assignment, data in zip(
        assignments, AssignmentSerializer(assignments, many=True).data, strict=True
    ):
        state = states.get(assignment.partition)
        rows.append(_row(data, state, assignment.log_end_offset, assignment.size_bytes))
    return rows


def _row(data: Any, state: Any, observed_end: int, observed_size: int) -> PartitionRow:
    return PartitionRow(
        partition=data["partition"],
        leader_id=data["leader_id"],
        replicas=list(data["replicas"]),
        isr=list(data["isr"]),
        status=data["status"],
        start_offset=state.log_start_offset if state is not None else None,
        end_offset=state.log_end_offset if state is not None else observed_end,
        size_bytes=state.size_bytes if state is not None else observed_size,
        live=state is not None,
    )


def _leader_states(topic: Topic, assignments: list[PartitionAssignment]) -> dict[int, Any]:
    """Partition -> its leader's ``PartitionState``, for the partitions whose leader
    answered."""
    leader_of = {a.partition: a.leader_id for a in assignments if a.leader_id is not None}
    leaders = {a.leader_id: a.leader for a in assignments if a.leader is not None}
    states: dict[int, Any] = {}
    for broker_pk, broker in leaders.items():
        try:
            response = brokers.describe_state(broker.address, [topic.full_name])
        except DomainError as exc:
            log.info("topic page: broker %s did not describe %s: %s", broker, topic, exc)
            continue
        for state in response.partitions:
            if state.topic == topic.full_name and leader_of.get(state.partition) == broker_pk:
                states[state.partition] = state
    return states
