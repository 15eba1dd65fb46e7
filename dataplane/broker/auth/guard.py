"""Authorization around the broker's handlers, partition by partition.

Each guard splits a request into the partitions the caller may touch and those it may
not; the handler sees only the former, and the latter come back as results carrying
TOPIC_AUTHORIZATION_FAILED (no offsets, no records). A request with nothing allowed
never reaches the handler, so a refusal is answered at once and the same way whether
the topic exists or not. A transactional produce whose ``transactional_id`` the caller
may not use is refused whole (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, decided by the
name alone, so the same whether the id exists or not). Metadata answers list only
topics the caller may describe; a topic asked for by name that it may not describe is
answered TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2
from dataplane.broker.auth.authorizer import CONSUME, DESCRIBE, PRODUCE, Authorizer
from dataplane.broker.groups import OFFSETS_TOPIC
from dataplane.errors import ErrorCode, MeridianError

R = TypeVar("R")


def _split(authz: Authorizer, items: Any, operation: str) -> tuple[list[Any], list[Any]]:
    allowed: list[tuple[Any, None]] = []
    refused: list[tuple[Any, MeridianError]] = []
    for item in items:
        error = authz.topic_error(item.topic, operation)
        if error is None:
            allowed.append((item, None))
        else:
            refused.append((item, error))
    return [item for item, _ in allowed], refused


def _produce_split(
    authz: Authorizer, request: broker_pb2.ProduceRequest
) -> tuple[broker_pb2.ProduceRequest, list[broker_pb2.PartitionProduceResult]]:
    refusal = (
        authz.transactional_id_error(request.transactional_id, PRODUCE)
        if request.transactional_id
        else None
    )
    allowed: list[Any]
    refused: list[Any]
    if refusal is not None:
        # Before anything reaches the coordinator: its answers (the id's producer, epoch
        # and state) are for the id's own tenant.
        allowed, refused = [], [(p, refusal) for p in request.partitions]
    else:
        allowed, refused = _split(authz, request.partitions, PRODUCE)
    if not refused:
        return request, []
    trimmed = broker_pb2.ProduceRequest()
    trimmed.CopyFrom(request)
    del trimmed.partitions[:]
    trimmed.partitions.extend(allowed)
    return trimmed, [
        broker_pb2.PartitionProduceResult(
            topic=p.topic,
            partition=p.partition,
            error=error.code,
            error_message=error.message,
            base_offset=-1,
            log_append_time_ms=-1,
            log_start_offset=-1,
        )
        for p, error in refused
    ]


async def produce(
    authz: Authorizer,
    request: broker_pb2.ProduceRequest,
    run: Callable[[broker_pb2.ProduceRequest], Awaitable[broker_pb2.ProduceResponse]],
) -> broker_pb2.ProduceResponse:
    trimmed, refused = _produce_split(authz, request)
    if refused and not trimmed.partitions:
        return broker_pb2.ProduceResponse(correlation_id=request.correlation_id, results=refused)
    response = await run(trimmed)
    response.results.extend(refused)
    return response


def submit_produce(
    authz: Authorizer,
    request: broker_pb2.ProduceRequest,
    submit: Callable[[broker_pb2.ProduceRequest], Awaitable[broker_pb2.ProduceResponse]],
) -> Awaitable[broker_pb2.ProduceResponse]:
    """As ``produce`` for a pipelined stream: ``submit`` is called (and may raise) now."""
    trimmed, refused = _produce_split(authz, request)
    if not refused:
        return submit(request)
    if not trimmed.partitions:
        answered: asyncio.Future[broker_pb2.ProduceResponse] = (
            asyncio.get_running_loop().create_future()
        )
        answered.set_result(
            broker_pb2.ProduceResponse(correlation_id=request.correlation_id, results=refused)
        )
        return answered
    pending = submit(trimmed)

    async def merged() -> broker_pb2.ProduceResponse:
        response = await pending
        response.results.extend(refused)
        return response

    return asyncio.ensure_future(merged())


async def fetch(
    authz: Authorizer,
    request: broker_pb2.FetchRequest,
    run: Callable[[broker_pb2.FetchRequest], Awaitable[broker_pb2.FetchResponse]],
) -> broker_pb2.FetchResponse:
    allowed, refused = _split(authz, request.partitions, CONSUME)
    results = [_fetch_refusal(p, error) for p, error in refused]
    if not refused:
        return await run(request)
    if not allowed:
        return broker_pb2.FetchResponse(results=results)
    trimmed = broker_pb2.FetchRequest()
    trimmed.CopyFrom(request)
    del trimmed.partitions[:]
    trimmed.partitions.extend(allowed)
    response = await run(trimmed)
    response.results.extend(results)
    return response


def _fetch_refusal(p: Any, error: MeridianError) -> broker_pb2.FetchPartitionResult:
    return broker_pb2.FetchPartitionResult(
        topic=p.topic,
        partition=p.partition,
        error=error.code,  # type: ignore[arg-type]
        error_message=error.message,
        high_watermark=-1,
        log_start_offset=-1,
        log_end_offset=-1,
    )


async def list_offsets(
    authz: Authorizer,
    request: broker_pb2.ListOffsetsRequest,
    run: Callable[[broker_pb2.ListOffsetsRequest], Awaitable[broker_pb2.ListOffsetsResponse]],
) -> broker_pb2.ListOffsetsResponse:
    allowed, refused = _split(authz, request.partitions, CONSUME)
    if not refused:
        return await run(request)
    results = [
        broker_pb2.ListOffsetsResult(
            topic=p.topic,
            partition=p.partition,
            error=error.code,
            error_message=error.message,
            offset=-1,
            timestamp=-1,
        )
        for p, error in refused
    ]
    if not allowed:
        return broker_pb2.ListOffsetsResponse(results=results)
    response = await run(broker_pb2.ListOffsetsRequest(partitions=allowed))
    response.results.extend(results)
    return response


async def metadata(
    authz: Authorizer,
    request: broker_pb2.MetadataRequest,
    run: Callable[[broker_pb2.MetadataRequest], Awaitable[broker_pb2.MetadataResponse]],
) -> broker_pb2.MetadataResponse:
    """Peer requests (``local_only``) need the internal role; other answers are
    filtered to what the caller may describe."""
    if request.local_only:
        authz.check_internal("Metadata(local_only)")
    wanted = list(dict.fromkeys(request.topics))
    refused = [name for name in wanted if not authz.may_describe_topic(name)]
    if wanted and len(refused) == len(wanted):
        # The brokers as any answer lists them, and no topic.
        response = await run(broker_pb2.MetadataRequest(topics=[OFFSETS_TOPIC]))
        del response.topics[:]
    else:
        asked = broker_pb2.MetadataRequest(
            topics=[n for n in wanted if n not in refused], local_only=request.local_only
        )
        response = await run(asked)
        kept = [t for t in response.topics if authz.may_describe_topic(t.name)]
        del response.topics[:]
        response.topics.extend(kept)
    for name in refused:
        error = authz.topic_error(name, DESCRIBE)
        assert error is not None
        response.topics.add(name=name, error=error.code, error_message=error.message)
    return response


def describe_state(
    authz: Authorizer,
    request: admin_pb2.DescribeStateRequest,
    describe: Callable[[admin_pb2.DescribeStateRequest], admin_pb2.DescribeStateResponse],
) -> admin_pb2.DescribeStateResponse:
    """``Admin.DescribeState``: an internal caller sees every partition it asks for; a
    client must name its topics and gets the state of those it may describe, a topic it
    may not describe being answered like a missing one (no partitions)."""
    if not authz.restricts_caller():
        return describe(request)
    if not request.topics:
        raise MeridianError(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "describing every partition of a broker is internal to the cluster: name topics",
        )
    allowed = {topic for topic in request.topics if authz.may_describe_topic(topic)}
    response = describe(request)
    kept = [state for state in response.partitions if state.topic in allowed]
    del response.partitions[:]
    response.partitions.extend(kept)
    return response
