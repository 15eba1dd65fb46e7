"""The Kafka listener's data APIs: Produce, Fetch, ListOffsets, Metadata, InitProducerId,
DescribeConfigs, and CreateTopics/DeleteTopics (refused: topics are the control plane's).

Each handler turns the Kafka request into the gRPC request of the same meaning, runs it
through the broker's servicer (``calls``), and turns the answer back, field by field:

- **Produce** (v3-9): per partition, the records as sent (whole RecordBatch v2 batches,
  validated record by record by the log, as for gRPC); ``acks=0`` is never answered, as
  Kafka does not answer it, and one refused in any partition raises ``AcksZeroRefused``
  (the connection is then closed, as Kafka closes it, so the client refreshes its
  metadata instead of writing on into nothing). An idempotent retry's duplicate is
  answered with its original's offset and no error, as Kafka answers it. A
  transactional producer's ``transactional_id`` goes with the request, so the leader
  verifies its partitions with the transaction coordinator (``txns.py``).
- **Fetch** (v4-12): sessionless (``session_id`` 0 in every answer, so clients send full
  requests; an incremental request naming a session is FETCH_SESSION_ID_NOT_FOUND); a
  ``current_leader_epoch`` below the partition's is FENCED_LEADER_EPOCH, above it
  UNKNOWN_LEADER_EPOCH; ``isolation_level`` 1 (read_committed) reads up to the last
  stable offset and gets the aborted transactions overlapping what it reads (both levels
  get the last stable offset; read_uncommitted stops before an open half message, and
  lists no aborted transaction, as Kafka's does not); follower fetches (``replica_id`` >=
  0) are refused: replicas use gRPC's ReplicaFetch.
- **ListOffsets** (v1-6): -1 the high watermark (with ``isolation_level`` 1, v2+: the
  last stable offset), -2 the log start, else the first offset at or after the timestamp
  (-1 and timestamp -1 when none).
- **Metadata** (v0-12): the brokers with their Kafka listener, and the topics the caller
  may describe, with leaders, epochs, replicas and ISR as gRPC's Metadata gives them; a
  topic named that the caller may not describe is TOPIC_AUTHORIZATION_FAILED whether it
  exists or not; topics are never created by asking (``allow_auto_topic_creation`` is
  ignored: topics come from the control plane). A broker that cannot answer yet (still
  loading its logs) answers each asked topic with the error, or no topics.
- **InitProducerId** (v0-4): an idempotent producer's id and epoch, or the bump of a
  known one's epoch (v3+); with a ``transactional_id``, the transaction coordinator's
  (``txns.py``).
- **DescribeConfigs** (v1-4): a topic's effective configuration under Kafka's names, read
  from a broker hosting it (this one, or its leader through the Admin service); broker
  resources answer the broker's defaults for new partitions.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc, broker_pb2
from dataplane.broker.auth.authorizer import CONSUME, DESCRIBE, Authorizer
from dataplane.broker.cluster import ClusterView
from dataplane.broker.errors import to_error
from dataplane.broker.groups import OFFSETS_TOPIC
from dataplane.broker.kafka import codes
from dataplane.broker.kafka.calls import CallContext
from dataplane.broker.kafka.wire import Request
from dataplane.broker.partitions import PartitionRegistry
from dataplane.broker.quotas import QuotaManager
from dataplane.broker.services import AdminServicer, BrokerServicer
from dataplane.broker.throttling import metered, metered_start
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.config import LogConfig

ZERO_UUID = uuid.UUID(int=0)
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
CONFIG_SOURCE_TOPIC, CONFIG_SOURCE_DEFAULT = 1, 5
TOPICS_AT_THE_CONTROL_PLANE = (
    "topics are created, changed and deleted through Meridian's control plane (REST API "
    "/api/v1/topics, the console, or `meridian topics ...`), not through Kafka's admin API"
)
Values = dict[str, Any]


class AcksZeroRefused(Exception):  # noqa: N818 - an outcome the listener acts on
    """An ``acks=0`` Produce failed in some partition: close the connection."""


@dataclass
class DataServices:
    broker: BrokerServicer
    admin: AdminServicer
    cluster: ClusterView
    registry: PartitionRegistry
    quotas: QuotaManager
    authorizer: Authorizer
    default_log: LogConfig
    peer_admin: Callable[[str], admin_pb2_grpc.AdminStub]  # host:port -> a stub


async def _run(
    services: DataServices, request: Any, call: Callable[[Any], Awaitable[Any]]
) -> tuple[Any, int]:
    """``call(request)`` through the quota gate: (response, throttle ms)."""
    return await metered(services.quotas, request, call, hold=False)


def _by_topic(results: Iterable[Any]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = {}
    for result in results:
        grouped.setdefault(result.topic, []).append(result)
    return grouped


# -- Produce ------------------------------------------------------------------------------
async def start_produce(
    services: DataServices, req: Request, ctx: CallContext
) -> Awaitable[Values | None]:
    """Admit a Produce (waiting out its tenant's quota debt) and start its appends now;
    the awaitable gives the answer (None for ``acks=0``). A connection starting its
    requests one after another appends them in that order while earlier ones are still
    being written and replicated, as a Kafka broker pipelines a producer's in-flight
    requests."""
    body = req.body
    pb = broker_pb2.ProduceRequest(
        acks=body.acks, timeout_ms=body.timeout_ms, transactional_id=body.transactional_id or ""
    )
    for topic in body.topic_data:
        for part in topic.partition_data:
            pb.partitions.add(topic=topic.name, partition=part.index, records=part.records or b"")
    try:
        started = await metered_start(services.quotas, pb, services.broker.start_produce)
    except Exception as exc:  # the request as a whole: every partition carries it
        return asyncio.ensure_future(_finished(body.acks, 0, _refused_all(pb, exc)))

    async def finish() -> Values | None:
        try:
            response, throttle_ms = await started
        except Exception as exc:
            return await _finished(body.acks, 0, _refused_all(pb, exc))
        return await _finished(body.acks, throttle_ms, list(response.results))

    return asyncio.ensure_future(finish())


async def produce(services: DataServices, req: Request, ctx: CallContext) -> Values | None:
    """A Produce on its own (``start_produce`` awaited through)."""
    return await (await start_produce(services, req, ctx))


async def _finished(acks: int, throttle_ms: int, results: list[Any]) -> Values | None:
    failed = [r for r in results if r.error]
    if acks == 0 and failed:
        first = failed[0]
        raise AcksZeroRefused(
            f"acks=0 produce to {first.topic}-{first.partition} failed: {first.error_message}"
        )
    return _produce_values(acks, throttle_ms, results)


def _refused_all(pb: Any, exc: Exception) -> list[Any]:
    error = to_error(exc)
    return [_refused_produce(p, error) for p in pb.partitions]


def _produce_values(acks: int, throttle_ms: int, results: list[Any]) -> Values | None:
    if acks == 0:
        return None
    return {
        "throttle_time_ms": throttle_ms,
        "responses": [
            {"name": topic, "partition_responses": [_produce_result(r) for r in rows]}
            for topic, rows in _by_topic(results).items()
        ],
    }


def _refused_produce(p: Any, error: MeridianError) -> broker_pb2.PartitionProduceResult:
    return broker_pb2.PartitionProduceResult(
        topic=p.topic,
        partition=p.partition,
        error=error.code,  # type: ignore[arg-type]
        error_message=error.message,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
    )


def _produce_result(r: Any) -> Values:
    return {
        "index": r.partition,
        "error_code": codes.kafka_code(r.error),
        "base_offset": r.base_offset,
        "log_append_time_ms": r.log_append_time_ms,
        "log_start_offset": r.log_start_offset,
        "record_errors": [],
        "error_message": r.error_message or None,
    }


# -- Fetch --------------------------------------------------------------------------------
async def fetch(services: DataServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    if body.session_id != 0 or body.session_epoch > 0:
        code = (
            codes.FETCH_SESSION_ID_NOT_FOUND
            if body.session_id
            else codes.INVALID_FETCH_SESSION_EPOCH
        )
        return {"error_code": code, "session_id": 0, "responses": []}
    refused: list[tuple[str, int, int]] = []
    committed = body.isolation_level == 1
    pb = broker_pb2.FetchRequest(
        max_wait_ms=max(0, body.max_wait_ms),
        min_bytes=max(0, body.min_bytes),
        max_bytes=max(0, body.max_bytes),
        isolation_level=broker_pb2.READ_COMMITTED if committed else broker_pb2.READ_UNCOMMITTED,
    )
    for topic in body.topics:
        for part in topic.partitions:
            code = _epoch_refusal(services, topic.topic, part.partition, part.current_leader_epoch)
            if body.replica_id >= 0:
                code = codes.NOT_LEADER_OR_FOLLOWER  # replicas fetch over gRPC
            if code:
                refused.append((topic.topic, part.partition, code))
                continue
            pb.partitions.add(
                topic=topic.topic,
                partition=part.partition,
                fetch_offset=part.fetch_offset,
                partition_max_bytes=max(0, part.partition_max_bytes),
            )
    throttle_ms, results = 0, []
    if pb.partitions:
        try:
            response, throttle_ms = await _run(
                services, pb, lambda r: services.broker.Fetch(r, ctx)
            )
            results = [(r.topic, _fetch_result(r, committed)) for r in response.results]
        except MeridianError as exc:
            results = [
                (p.topic, _fetch_error(p.partition, codes.kafka_code(exc.code)))
                for p in pb.partitions
            ]
    results += [(topic, _fetch_error(partition, code)) for topic, partition, code in refused]
    grouped: dict[str, list[Values]] = {}
    for topic, values in results:
        grouped.setdefault(topic, []).append(values)
    return {
        "throttle_time_ms": throttle_ms,
        "error_code": codes.NONE,
        "session_id": 0,
        "responses": [{"topic": t, "partitions": rows} for t, rows in grouped.items()],
    }


def _epoch_refusal(services: DataServices, topic: str, partition: int, epoch: int) -> int:
    """Kafka's leader-epoch fence of a fetch (0: none; -1 asks no check). Only for a
    topic the caller may read: to anyone else the partition answers as the servicer
    answers it (TOPIC_AUTHORIZATION_FAILED), so epochs never tell whether it exists."""
    if epoch < 0 or services.authorizer.topic_error(topic, CONSUME) is not None:
        return codes.NONE
    part = services.registry.get(topic, partition)
    if part is None:
        return codes.NONE
    current = part.replica.leader_epoch if part.replica is not None else 0
    if epoch < current:
        return codes.FENCED_LEADER_EPOCH
    if epoch > current:
        return codes.UNKNOWN_LEADER_EPOCH
    return codes.NONE


def _fetch_result(r: Any, committed: bool) -> Values:
    aborted = [
        {"producer_id": a.producer_id, "first_offset": a.first_offset}
        for a in r.aborted_transactions
    ]
    return {
        "partition_index": r.partition,
        "error_code": codes.kafka_code(r.error),
        "high_watermark": r.high_watermark,
        "last_stable_offset": r.last_stable_offset,
        "log_start_offset": r.log_start_offset,
        "aborted_transactions": aborted if committed else None,
        "preferred_read_replica": -1,
        # Never null on an error: librdkafka refuses a null record set (Kafka's brokers
        # send an empty one).
        "records": r.records if not r.error else b"",
    }


def _fetch_error(partition: int, code: int) -> Values:
    return {
        "partition_index": partition,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


# -- ListOffsets --------------------------------------------------------------------------
async def list_offsets(services: DataServices, req: Request, ctx: CallContext) -> Values:
    committed = req.version >= 2 and req.body.isolation_level == 1
    pb = broker_pb2.ListOffsetsRequest(
        isolation_level=broker_pb2.READ_COMMITTED if committed else broker_pb2.READ_UNCOMMITTED
    )
    for topic in req.body.topics:
        for part in topic.partitions:
            pb.partitions.add(
                topic=topic.name, partition=part.partition_index, timestamp=part.timestamp
            )
    asked = {(p.topic, p.partition): p.timestamp for p in pb.partitions}
    try:
        response, throttle_ms = await _run(
            services, pb, lambda r: services.broker.ListOffsets(r, ctx)
        )
        results = list(response.results)
    except MeridianError as exc:
        throttle_ms = 0
        results = [
            broker_pb2.ListOffsetsResult(topic=p.topic, partition=p.partition, error=exc.code)  # type: ignore[arg-type]
            for p in pb.partitions
        ]
    return {
        "throttle_time_ms": throttle_ms,
        "topics": [
            {"name": topic, "partitions": [_offset_result(r, asked) for r in rows]}
            for topic, rows in _by_topic(results).items()
        ],
    }


def _offset_result(r: Any, asked: dict[tuple[str, int], int]) -> Values:
    failed = bool(r.error)
    special = asked.get((r.topic, r.partition), 0) < 0  # latest / earliest: no timestamp
    return {
        "partition_index": r.partition,
        "error_code": codes.kafka_code(r.error),
        "timestamp": -1 if failed or special or r.offset < 0 else r.timestamp,
        "offset": -1 if failed else r.offset,
        "leader_epoch": -1,
    }


# -- Metadata -----------------------------------------------------------------------------
async def metadata(services: DataServices, req: Request, ctx: CallContext) -> Values:
    topics = req.body.topics
    names = (
        None if topics is None or (req.version == 0 and not topics) else [t.name for t in topics]
    )
    pb = broker_pb2.MetadataRequest(topics=[OFFSETS_TOPIC] if names == [] else (names or []))
    try:
        response, throttle_ms = await _run(services, pb, lambda r: services.broker.Metadata(r, ctx))
    except MeridianError as exc:
        return _metadata_refused(names or [], codes.kafka_code(exc.code))
    shown = [] if names == [] else [t for t in response.topics if t.name != OFFSETS_TOPIC or names]
    brokers = [
        {"node_id": b.id, "host": b.host, "port": b.kafka_port, "rack": b.rack or None}
        for b in response.brokers
        if b.kafka_port
    ]
    return {
        "throttle_time_ms": throttle_ms,
        "brokers": brokers,
        "cluster_id": response.cluster_id,
        "controller_id": response.broker_id,
        "topics": [_topic(t) for t in shown],
    }


def _metadata_refused(names: list[str], code: int) -> Values:
    """Metadata that failed as a whole: every asked topic carries the error; the
    brokers are left out, so a client asks another broker or again."""
    topics = [{"error_code": code, "name": name, "partitions": []} for name in names]
    return {"throttle_time_ms": 0, "brokers": [], "topics": topics}


def _topic(t: Any) -> Values:
    return {
        "error_code": codes.kafka_code(t.error),
        "name": t.name,
        "topic_id": ZERO_UUID,
        "is_internal": t.internal,
        "partitions": [
            {
                "error_code": codes.kafka_code(p.error),
                "partition_index": p.partition,
                "leader_id": p.leader_id,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": [],
            }
            for p in t.partitions
        ],
    }


# -- InitProducerId -----------------------------------------------------------------------
async def init_producer_id(services: DataServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    if body.transactional_id is not None:
        # Transactions are not served yet: only idempotent producers get ids.
        return {"error_code": codes.INVALID_REQUEST, "producer_id": -1, "producer_epoch": -1}
    pb = broker_pb2.InitProducerIdRequest(
        producer_id=body.producer_id if req.version >= 3 else -1,
        producer_epoch=body.producer_epoch if req.version >= 3 else -1,
    )
    return await producer_id_answer(
        _run(services, pb, lambda r: services.broker.InitProducerId(r, ctx))
    )


async def producer_id_answer(call: Awaitable[tuple[Any, int]]) -> Values:
    """InitProducerId's answer from a metered call (the broker's, or the transaction
    coordinator's for a transactional id)."""
    try:
        response, throttle_ms = await call
    except MeridianError as exc:
        return {"error_code": codes.kafka_code(exc.code), "producer_id": -1, "producer_epoch": -1}
    return {
        "throttle_time_ms": throttle_ms,
        "error_code": codes.kafka_code(response.error),
        "producer_id": response.producer_id,
        "producer_epoch": response.producer_epoch,
    }


# -- CreateTopics / DeleteTopics -----------------------------------------------------------
async def create_topics(services: DataServices, req: Request, ctx: CallContext) -> Values:
    return {
        "topics": [
            {
                "name": t.name,
                "error_code": codes.POLICY_VIOLATION,
                "error_message": TOPICS_AT_THE_CONTROL_PLANE,
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": None,
            }
            for t in req.body.topics
        ]
    }


async def delete_topics(services: DataServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    names = [t.name for t in body.topics] if req.version >= 6 else list(body.topic_names)
    return {
        "responses": [
            {
                "name": name,
                "error_code": codes.POLICY_VIOLATION,
                "error_message": TOPICS_AT_THE_CONTROL_PLANE,
            }
            for name in names
        ]
    }


# -- DescribeConfigs ----------------------------------------------------------------------
async def describe_configs(services: DataServices, req: Request, ctx: CallContext) -> Values:
    results = []
    for resource in req.body.resources:
        keys = resource.configuration_keys
        try:
            configs = await _configs_of(
                services, resource.resource_type, resource.resource_name, ctx
            )
            error, message = codes.NONE, None
        except MeridianError as exc:
            configs, error, message = [], codes.kafka_code(exc.code), exc.message
        if keys is not None:
            configs = [c for c in configs if c["name"] in keys]
        results.append(
            {
                "error_code": error,
                "error_message": message,
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "configs": configs,
            }
        )
    return {"throttle_time_ms": 0, "results": results}


async def _configs_of(
    services: DataServices, kind: int, name: str, ctx: CallContext
) -> list[Values]:
    if kind == RESOURCE_BROKER:
        return [_entry(k, v, CONFIG_SOURCE_DEFAULT) for k, v in _log_configs(services.default_log)]
    if kind != RESOURCE_TOPIC:
        raise MeridianError(ErrorCode.INVALID_REQUEST, f"resource type {kind} is not described")
    refusal = services.authorizer.topic_error(name, DESCRIBE)
    if refusal is not None:
        raise refusal
    state = await _partition_state(services, name, ctx)
    if state is None:
        raise MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no broker hosts topic {name!r}")
    entries = [_entry(k, v, CONFIG_SOURCE_TOPIC) for k, v in _partition_configs(state.config)]
    pushed = services.cluster.pushed.current
    topic = next((t for t in pushed.topics if t.name == name), None) if pushed else None
    if topic is not None:
        entries.append(
            _entry("min.insync.replicas", str(topic.min_insync_replicas or 1), CONFIG_SOURCE_TOPIC)
        )
        unclean = "true" if topic.unclean_leader_election else "false"
        entries.append(_entry("unclean.leader.election.enable", unclean, CONFIG_SOURCE_TOPIC))
    return entries


async def _partition_state(services: DataServices, name: str, ctx: CallContext) -> Any:
    """The state of one partition of topic ``name``: hosted here, or from its leader."""
    request = admin_pb2.DescribeStateRequest(topics=[name])
    if name in services.cluster.placement(local_only=True):
        local = await services.admin.DescribeState(request, ctx)
        return local.partitions[0] if local.partitions else None
    leaders = services.cluster.placement().get(name, {})
    for leader in sorted(set(leaders.values())):
        info = services.cluster.broker(leader)
        if info is None or not info.port:
            continue
        try:
            answer = await services.peer_admin(f"{info.host}:{info.port}").DescribeState(
                request, timeout=5
            )
        except grpc.RpcError as exc:
            raise MeridianError(
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"the leader of {name!r} did not answer: {exc.code().name}",
            ) from None
        if answer.partitions:
            return answer.partitions[0]
    return None


def _partition_configs(config: Any) -> list[tuple[str, str]]:
    pairs = [
        ("cleanup.policy", "delete"),
        ("retention.ms", str(config.retention_ms)),
        ("retention.bytes", str(config.retention_bytes)),
        ("segment.bytes", str(config.max_segment_bytes)),
        ("segment.ms", str(config.segment_ms)),
        ("max.message.bytes", str(config.max_message_bytes)),
        ("message.timestamp.type", config.timestamp_type),
        ("index.interval.bytes", str(config.index_interval_bytes)),
        ("remote.storage.enable", "true" if config.remote_storage else "false"),
    ]
    if config.remote_storage:
        pairs += [
            ("local.retention.ms", str(config.local_retention_ms)),
            ("local.retention.bytes", str(config.local_retention_bytes)),
        ]
    return pairs


def _log_configs(config: LogConfig) -> list[tuple[str, str]]:
    return [
        ("log.retention.ms", str(config.retention_ms)),
        ("log.retention.bytes", str(config.retention_bytes)),
        ("log.segment.bytes", str(config.max_segment_bytes)),
        ("message.max.bytes", str(config.max_batch_bytes)),
    ]


def _entry(name: str, value: str, source: int) -> Values:
    return {
        "name": name,
        "value": value,
        "read_only": True,
        "config_source": source,
        "is_default": source == CONFIG_SOURCE_DEFAULT,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": 0,
        "documentation": None,
    }
