"""``ListOffsets`` for many partitions: one request per leader broker, retried on moves.

A spec is ``EARLIEST`` (-2: the log start), ``LATEST`` (-1: the high watermark) or a
timestamp in ms (the first offset whose record timestamp is at or after it; -1 when
there is none).

``ends_and_ages`` asks the same of a group's committed offsets: per partition the high
watermark and the age of the record at the committed offset (the group's oldest
unconsumed record: its lag in time), which the leader finds through its offset index.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import grpc

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

LATEST: Final = -1
EARLIEST: Final = -2
_SPEC_NAMES: Final = {"latest": LATEST, "earliest": EARLIEST}
# Retriable failures are retried this long (a leader moving; a new leader whose high
# watermark has not reached its epoch's start answers LEADER_NOT_AVAILABLE meanwhile),
# the pause doubling up to a second.
_RETRY_FOR_S: Final = 10.0
_MAX_BACKOFF_S: Final = 1.0


def offset_spec(spec: int | str) -> int:
    """``"earliest"``, ``"latest"`` or a timestamp (ms) as the wire's ``timestamp``."""
    if isinstance(spec, str):
        if spec not in _SPEC_NAMES:
            raise ValueError(f"unknown offset spec {spec!r}: earliest, latest or a timestamp")
        return _SPEC_NAMES[spec]
    if spec < EARLIEST:
        raise ValueError(f"bad offset spec {spec}: earliest, latest or a timestamp >= 0")
    return int(spec)


@dataclass(frozen=True, slots=True)
class EndAndAge:
    """A partition's high watermark, and the record at a committed offset: its
    timestamp (-1 when the group is caught up) and its age in ms by the leader's clock
    (0 when caught up)."""

    end_offset: int
    record_timestamp: int
    age_ms: int


def list_offsets(
    metadata: ClusterMetadata,
    specs: Mapping[TopicPartition, int],
    *,
    timeout_s: float = 30.0,
    backoff_s: float = 0.1,
    read_committed: bool = False,
) -> dict[TopicPartition, tuple[int, int]]:
    """``{tp: (offset, timestamp)}`` for each spec (see the module docstring); with
    ``read_committed`` the latest offset is the last stable offset.

    Retriable failures (a moved leader, an unreachable broker) refresh the metadata and
    are retried for up to ten seconds; others raise the partition's ``MeridianError``.
    """
    asked = {tp: _item(tp, spec) for tp, spec in specs.items()}
    isolation = broker_pb2.READ_COMMITTED if read_committed else broker_pb2.READ_UNCOMMITTED
    found = _query(metadata, asked, timeout_s, backoff_s, isolation)
    return {tp: (r.offset, r.timestamp) for tp, r in found.items()}


def ends_and_ages(
    metadata: ClusterMetadata,
    committed: Mapping[TopicPartition, int],
    *,
    timeout_s: float = 30.0,
    backoff_s: float = 0.1,
) -> dict[TopicPartition, EndAndAge]:
    """Per partition of ``committed`` (a group's committed offsets): the high watermark
    and the age of the record at the committed offset; retried as ``list_offsets``."""
    asked = {tp: _item(tp, LATEST, record_at=offset) for tp, offset in committed.items()}
    found = _query(metadata, asked, timeout_s, backoff_s)
    return {tp: EndAndAge(r.offset, r.record_timestamp, r.record_age_ms) for tp, r in found.items()}


def _item(
    tp: TopicPartition, spec: int, record_at: int | None = None
) -> broker_pb2.ListOffsetsPartition:
    item = broker_pb2.ListOffsetsPartition(topic=tp.topic, partition=tp.partition, timestamp=spec)
    if record_at is not None:
        item.record_at = record_at
    return item


def _query(
    metadata: ClusterMetadata,
    items: Mapping[TopicPartition, broker_pb2.ListOffsetsPartition],
    timeout_s: float,
    backoff_s: float,
    isolation: broker_pb2.IsolationLevel.ValueType = broker_pb2.READ_UNCOMMITTED,
) -> dict[TopicPartition, broker_pb2.ListOffsetsResult]:
    """Each item's result from its partition's leader (see ``list_offsets``)."""
    pending = dict(items)
    found: dict[TopicPartition, broker_pb2.ListOffsetsResult] = {}
    last: MeridianError | None = None
    deadline = time.monotonic() + _RETRY_FOR_S
    for attempt in itertools.count():
        if attempt:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(backoff_s * 2 ** (attempt - 1), _MAX_BACKOFF_S, left))
            metadata.refresh({tp.topic for tp in pending})
        for address, group in _by_leader(metadata, pending).items():
            try:
                found.update(_ask(metadata, address, group, timeout_s, isolation))
            except MeridianError as error:
                if not error.retriable:
                    raise
                last = error
        pending = {tp: spec for tp, spec in pending.items() if tp not in found}
        if not pending:
            return found
    tp = next(iter(pending))
    raise last or MeridianError(
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no offsets for {tp.topic}/{tp.partition}"
    )


def _by_leader(
    metadata: ClusterMetadata, specs: Mapping[TopicPartition, broker_pb2.ListOffsetsPartition]
) -> dict[str, dict[TopicPartition, broker_pb2.ListOffsetsPartition]]:
    groups: dict[str, dict[TopicPartition, broker_pb2.ListOffsetsPartition]] = defaultdict(dict)
    for tp, spec in specs.items():
        try:
            groups[metadata.leader_for(tp.topic, tp.partition).address][tp] = spec
        except MeridianError as error:
            if not error.retriable:
                raise
    return groups


def _ask(
    metadata: ClusterMetadata,
    address: str,
    specs: dict[TopicPartition, broker_pb2.ListOffsetsPartition],
    timeout_s: float,
    isolation: broker_pb2.IsolationLevel.ValueType = broker_pb2.READ_UNCOMMITTED,
) -> dict[TopicPartition, broker_pb2.ListOffsetsResult]:
    request = broker_pb2.ListOffsetsRequest(
        partitions=list(specs.values()), isolation_level=isolation
    )
    try:
        response = metadata.pool.get(address).broker.ListOffsets(request, timeout=timeout_s)
    except grpc.RpcError as exc:
        metadata.pool.forget(address)
        raise error_from_rpc(exc) from None
    out: dict[TopicPartition, broker_pb2.ListOffsetsResult] = {}
    for result in response.results:
        tp = TopicPartition(result.topic, result.partition)
        if result.error == ErrorCode.NONE:
            out[tp] = result
        elif not MeridianError(result.error).retriable:
            raise MeridianError(result.error, f"{tp.topic}/{tp.partition}: {result.error_message}")
    return out
