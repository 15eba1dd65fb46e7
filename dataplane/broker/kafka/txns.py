"""The Kafka listener's transaction APIs, on the broker's transaction coordinator.

FindCoordinator with key type 1 (a transactional id), InitProducerId with a
``transactional_id``, AddPartitionsToTxn (v0-3: the clients' versions; v4+ are Kafka's
broker-to-broker batches), AddOffsetsToTxn, EndTxn and TxnOffsetCommit run through the
``TransactionsServicer`` as gRPC's do (``calls``): the same authorization (transactional
ids start with ``<tenant>.``), the same coordinator, fencing, timeouts and markers. A
transactional producer's Produce names its ``transactional_id`` (``data.py``), so the
partition's leader verifies the partition is in its transaction before the first batch;
Fetch and ListOffsets carry the isolation level, and read_committed fetches get the last
stable offset and the aborted transactions (``data.py``); OffsetFetch's ``require_stable``
answers UNSTABLE_OFFSET_COMMIT for an offset an open transaction committed
(``groups.py``). Kafka's clients see every answer under Kafka's error codes
(``codes.py``): PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE, ...;
PRODUCER_FENCED as INVALID_PRODUCER_EPOCH to the versions before it (InitProducerId
< v4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn < v2, TxnOffsetCommit < v3), as
Kafka's brokers answer them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from dataplane._gen.meridian.v1 import common_pb2, txn_pb2
from dataplane.broker.kafka import codes, data, groups
from dataplane.broker.kafka.calls import CallContext
from dataplane.broker.kafka.wire import Request
from dataplane.broker.quotas import QuotaManager
from dataplane.broker.throttling import metered
from dataplane.broker.txn.servicer import TransactionsServicer
from dataplane.errors import ErrorCode, MeridianError

Values = dict[str, Any]

_FENCED = codes.kafka_code(ErrorCode.PRODUCER_FENCED)
_OLD_FENCED = codes.kafka_code(ErrorCode.INVALID_PRODUCER_EPOCH)
# The first version of each API whose clients know PRODUCER_FENCED (Kafka's brokers
# answer the older ones INVALID_PRODUCER_EPOCH instead).
_FENCED_FROM = {"InitProducerId": 4, "AddPartitions": 2, "AddOffsets": 2, "EndTxn": 2}
_FENCED_FROM_TXN_OFFSET_COMMIT = 3


def _for_version(code: int, version: int, first: int) -> int:
    """``code`` as a client of ``version`` knows it (PRODUCER_FENCED from ``first`` on)."""
    return _OLD_FENCED if code == _FENCED and version < first else code


@dataclass
class TxnServices:
    transactions: TransactionsServicer
    quotas: QuotaManager


async def _call(
    services: TxnServices, pb: Any, method: Callable[[Any, Any], Awaitable[Any]], ctx: CallContext
) -> tuple[Any, int]:
    return await metered(services.quotas, pb, lambda r: method(r, ctx), hold=False)


# -- FindCoordinator ----------------------------------------------------------------------
async def find_coordinator(
    services: TxnServices, group_services: groups.GroupServices, req: Request, ctx: CallContext
) -> Values:
    """Groups' keys as before (``groups.py``); transactional ids to their coordinator."""
    if req.body.key_type != groups.TRANSACTION_KEY:
        return await groups.find_coordinator(group_services, req, ctx)
    return await groups.answer_find_coordinator(req, lambda key: _coordinator(services, key, ctx))


async def _coordinator(services: TxnServices, key: str, ctx: CallContext) -> Values:
    pb = txn_pb2.FindTxnCoordinatorRequest(transactional_id=key)
    find = _call(services, pb, services.transactions.FindCoordinator, ctx)
    return await groups.coordinator_entry(key, find)


# -- InitProducerId -----------------------------------------------------------------------
async def init_producer_id(
    services: TxnServices, data_services: data.DataServices, req: Request, ctx: CallContext
) -> Values:
    body = req.body
    if body.transactional_id is None:
        return await data.init_producer_id(data_services, req, ctx)
    pb = txn_pb2.TxnInitProducerIdRequest(
        transactional_id=body.transactional_id,
        transaction_timeout_ms=body.transaction_timeout_ms,
        producer_id=body.producer_id if req.version >= 3 else -1,
        producer_epoch=body.producer_epoch if req.version >= 3 else -1,
    )
    answer = await data.producer_id_answer(
        _call(services, pb, services.transactions.InitProducerId, ctx)
    )
    answer["error_code"] = _for_version(
        answer["error_code"], req.version, _FENCED_FROM["InitProducerId"]
    )
    return answer


# -- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn -------------------------------------------
async def add_partitions(services: TxnServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    pb = txn_pb2.AddPartitionsToTxnRequest(
        transactional_id=body.v3_and_below_transactional_id,
        producer_id=body.v3_and_below_producer_id,
        producer_epoch=body.v3_and_below_producer_epoch,
    )
    for topic in body.v3_and_below_topics:
        pb.partitions.extend(
            common_pb2.TopicPartition(topic=topic.name, partition=p) for p in topic.partitions
        )
    throttle_ms = 0
    try:
        response, throttle_ms = await _call(services, pb, services.transactions.AddPartitions, ctx)
        outcomes = [(r.topic, r.partition, codes.kafka_code(r.error)) for r in response.results]
    except MeridianError as exc:
        code = codes.kafka_code(exc.code)
        outcomes = [(tp.topic, tp.partition, code) for tp in pb.partitions]
    first = _FENCED_FROM["AddPartitions"]
    topics: dict[str, list[Values]] = {}
    for topic, partition, code in outcomes:
        topics.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "partition_error_code": _for_version(code, req.version, first),
            }
        )
    return {
        "throttle_time_ms": throttle_ms,
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": rows} for name, rows in topics.items()
        ],
    }


async def add_offsets(services: TxnServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    pb = txn_pb2.AddOffsetsToTxnRequest(
        transactional_id=body.transactional_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        group_id=body.group_id,
    )
    answer = await _error_only(services, pb, services.transactions.AddOffsets, ctx)
    answer["error_code"] = _for_version(
        answer["error_code"], req.version, _FENCED_FROM["AddOffsets"]
    )
    return answer


async def end_txn(services: TxnServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    pb = txn_pb2.EndTxnRequest(
        transactional_id=body.transactional_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        commit=bool(body.committed),
    )
    answer = await _error_only(services, pb, services.transactions.EndTxn, ctx)
    answer["error_code"] = _for_version(answer["error_code"], req.version, _FENCED_FROM["EndTxn"])
    return answer


async def _error_only(
    services: TxnServices, pb: Any, method: Callable[[Any, Any], Awaitable[Any]], ctx: CallContext
) -> Values:
    try:
        response, throttle_ms = await _call(services, pb, method, ctx)
    except MeridianError as exc:
        return {"throttle_time_ms": 0, "error_code": codes.kafka_code(exc.code)}
    return {"throttle_time_ms": throttle_ms, "error_code": codes.kafka_code(response.error)}


# -- TxnOffsetCommit ----------------------------------------------------------------------
async def txn_offset_commit(services: TxnServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    pb = txn_pb2.TxnOffsetCommitRequest(
        transactional_id=body.transactional_id,
        group_id=body.group_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        generation_id=body.generation_id if req.version >= 3 else -1,
        member_id=(body.member_id or "") if req.version >= 3 else "",
        group_instance_id=(body.group_instance_id or "") if req.version >= 3 else "",
    )
    for topic in body.topics:
        for part in topic.partitions:
            pb.offsets.add(
                topic=topic.name,
                partition=part.partition_index,
                offset=part.committed_offset,
                metadata=part.committed_metadata or "",
                leader_epoch=part.committed_leader_epoch if req.version >= 2 else -1,
            )
    throttle_ms = 0
    try:
        response, throttle_ms = await _call(
            services, pb, services.transactions.TxnOffsetCommit, ctx
        )
        outcomes = [(r.topic, r.partition, codes.kafka_code(r.error)) for r in response.results]
    except MeridianError as exc:
        code = codes.kafka_code(exc.code)
        outcomes = [(o.topic, o.partition, code) for o in pb.offsets]
    topics: dict[str, list[Values]] = {}
    for topic, partition, code in outcomes:
        code = _for_version(code, req.version, _FENCED_FROM_TXN_OFFSET_COMMIT)
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {
        "throttle_time_ms": throttle_ms,
        "topics": [{"name": name, "partitions": rows} for name, rows in topics.items()],
    }
