"""``QuotaInterceptor``: where the broker charges tenants' rate quotas and holds responses.

A gRPC server interceptor wraps the handlers of the client-facing services
(``meridian.v1.Broker``, ``meridian.v1.GroupCoordinator`` and ``meridian.v1.Delay``, whose
calls name a tenant's timer log or a scheduled record's id); every other service (Admin,
Replication, health) passes through untouched. Before a wrapped call runs, it is
held while a bucket of a tenant it names (and the caller acts for) is in debt
(``claims_of``, ``QuotaManager.admit``), so a tenant's many concurrent calls do their
work at its rate, not only get their answers late. Once it has its response, what it
used is charged (``usage_of``, see ``dataplane.broker.quotas``), the response's
``throttle_ms`` is set where the message has one (Produce, Fetch), and the response is
held for the throttle time. ProduceStream holds each request before the servicer reads it
the same way, and charges and holds each response in turn, so they still leave in request
order, and a stream's later requests keep being read and appended meanwhile (the
servicer's pipeline bound applies). A call that fails is not charged. The hold before and
the hold after together are at most ``max_hold_ms``; ``throttle_ms`` counts both.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from dataplane.broker.auth import principal
from dataplane.broker.auth.authorizer import tenant_of
from dataplane.broker.quotas import (
    FETCH,
    PRODUCE,
    REQUESTS,
    QuotaManager,
    Throttle,
)
from dataplane.delays import timer_topic

THROTTLED_SERVICES = (
    "/meridian.v1.Broker/",
    "/meridian.v1.GroupCoordinator/",
    "/meridian.v1.Delay/",
)
Usage = dict[tuple[str, str], int]
Sizes = dict[tuple[str, int], int]


def _add(usage: Usage, tenant: str | None, kind: str, amount: int) -> None:
    if tenant is not None:
        usage[(tenant, kind)] = usage.get((tenant, kind), 0) + amount


def _requests(usage: Usage, tenants: set[str | None]) -> Usage:
    for tenant in tenants:
        _add(usage, tenant, REQUESTS, 1)
    return usage


def produce_sizes(request: Any) -> Sizes:
    """Record bytes per (topic, partition) of a ProduceRequest."""
    return {(p.topic, p.partition): len(p.records) for p in request.partitions}


def produce_usage(sizes: Sizes, response: Any) -> Usage:
    """Bytes of the partitions the response accepted, and one request per tenant."""
    usage: Usage = {}
    tenants: set[str | None] = set()
    for result in response.results:
        if not result.error:
            tenant = tenant_of(result.topic)
            _add(usage, tenant, PRODUCE, sizes.get((result.topic, result.partition), 0))
            tenants.add(tenant)
    return _requests(usage, tenants)


def usage_of(request: Any, response: Any) -> Usage:
    """What a successful unary call of a throttled service used, by tenant and kind.

    Only what was answered without error counts: a topic, partition or group the broker
    refused (another tenant's, unauthorized, unknown) charges its tenant nothing.
    """
    name = type(response).__name__
    if name == "ProduceResponse":
        return produce_usage(produce_sizes(request), response)
    usage: Usage = {}
    if name == "FetchResponse":
        for result in response.results:
            if not result.error:
                _add(usage, tenant_of(result.topic), FETCH, len(result.records))
        return _requests(usage, {tenant_of(r.topic) for r in response.results if not r.error})
    if name == "MetadataResponse":  # a tenant is known only from the topics asked for
        asked = set(request.topics)
        answered = {tenant_of(t.name) for t in response.topics if t.name in asked and not t.error}
        return _requests(usage, answered)
    if name == "DescribeGroupsResponse":
        return _requests(usage, {tenant_of(g.group_id) for g in response.groups if not g.error})
    if name == "ListGroupsResponse":
        return usage  # names no tenant of its own: not charged
    if getattr(response, "error", 0):
        return usage  # refused as a whole (e.g. GROUP_AUTHORIZATION_FAILED)
    results = getattr(response, "results", None)
    if results is not None and name != "OffsetCommitResponse" and name != "OffsetFetchResponse":
        named = [r for r in results if not getattr(r, "error", 0)]
        return _requests(usage, {tenant_of(_name_of(r)) for r in named})
    return _requests(usage, {tenant_of(g) for g in [*_groups(request), *_delay_names(request)]})


def claims_of(request: Any) -> Usage:
    """What a call is expected to use, from its request alone (before it runs): the
    produce bytes and one request for each tenant it names (fetch bytes are unknown until
    read, so a Fetch claims only its tenants' fetch buckets). Only tenants the caller
    acts for are claimed (every tenant when authentication is off), so a call naming
    another tenant's topics neither waits on nor reserves that tenant's quota."""
    claims: Usage = {}
    name = type(request).__name__
    if name == "ProduceRequest":
        for (topic, _), size in produce_sizes(request).items():
            _add(claims, tenant_of(topic), PRODUCE, size)
        tenants = {tenant_of(p.topic) for p in request.partitions}
    elif name == "FetchRequest":
        tenants = {tenant_of(p.topic) for p in request.partitions}
        for tenant in tenants:
            _add(claims, tenant, FETCH, 0)
    elif name == "MetadataRequest":
        tenants = {tenant_of(t) for t in request.topics}
    else:
        fields = request.DESCRIPTOR.fields_by_name
        topics = [p.topic for p in request.partitions] if "partitions" in fields else []
        names = [*_groups(request), *topics, *_delay_names(request)]
        tenants = {tenant_of(n) for n in names if isinstance(n, str)}
    claims = _requests(claims, tenants)
    caller = principal.current()
    if caller is None or caller.internal:
        return claims
    return {key: amount for key, amount in claims.items() if caller.role_in(key[0])}


def _name_of(result: Any) -> str:
    return str(getattr(result, "topic", "") or getattr(result, "group_id", ""))


def _delay_names(request: Any) -> list[str]:
    """What a Delay call names: timer logs (``tenant``, ``tenants``) or the topic of a
    scheduled record's ``id``."""
    fields = request.DESCRIPTOR.fields_by_name
    if "tenants" in fields:
        return [timer_topic(t) for t in request.tenants]
    if "tenant" in fields:
        return [timer_topic(request.tenant)]
    if "id" in fields:
        return [request.id.partition(":")[0]]
    return []


def _groups(request: Any) -> list[str]:
    fields = request.DESCRIPTOR.fields_by_name
    if "group_id" in fields:
        return [request.group_id]
    if "group_ids" in fields:
        return list(request.group_ids)
    return []


class QuotaInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """See the module docstring."""

    def __init__(self, quotas: QuotaManager) -> None:
        self.quotas = quotas
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(THROTTLED_SERVICES):
            return handler
        cached = self._wrapped.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._wrapped[method] = (handler, self._wrap(handler))
        return cached[1]

    def _wrap(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        options = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(handler.unary_unary), **options)
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._produce_stream(handler.stream_stream), **options
            )
        return handler  # no other shapes are served

    def _unary(self, behavior: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            async def run(request: Any) -> Any:
                response = behavior(request, context)
                return await response if inspect.isawaitable(response) else response

            response, _ = await metered(self.quotas, request, run)
            return response

        return call

    def _produce_stream(self, behavior: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
        async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            # One entry per request admitted, answered in order: its sizes, its claims and
            # how long it was held before the servicer read it.
            sent: deque[tuple[Sizes, Usage, float]] = deque()

            async def tapped() -> AsyncIterator[Any]:
                async for request in requests:
                    claims = claims_of(request)
                    waited_s = await self.quotas.admit(claims)
                    sent.append((produce_sizes(request), claims, waited_s))
                    yield request

            try:
                async for response in behavior(tapped(), context):
                    sizes, claims, waited_s = sent.popleft() if sent else ({}, {}, 0.0)
                    self.quotas.release(claims)
                    await self._settle(produce_usage(sizes, response), response, waited_s)
                    yield response
            finally:
                for _, claims, _ in sent:
                    self.quotas.release(claims)

        return call

    async def _settle(self, usage: Usage, response: Any, waited_s: float = 0.0) -> None:
        await settle(self.quotas, usage, response, waited_s)


async def metered(
    quotas: QuotaManager,
    request: Any,
    run: Callable[[Any], Awaitable[Any]],
    *,
    hold: bool = True,
) -> tuple[Any, int]:
    """``run(request)`` admitted, charged and held as the module docstring says (a unary
    call of a throttled service), and the throttle in ms. Without ``hold`` the response
    is not held after the call: the tenant's debt holds its next call instead (``admit``),
    as Kafka mutes a throttled connection while its client backs off by the
    ``throttle_time_ms`` it was told."""
    claims = claims_of(request)
    waited_s = await quotas.admit(claims)
    try:
        response = await run(request)
    finally:
        quotas.release(claims)
    return response, await settle(quotas, usage_of(request, response), response, waited_s, hold)


async def metered_start(
    quotas: QuotaManager, request: Any, start: Callable[[Any], Awaitable[Any]]
) -> Awaitable[tuple[Any, int]]:
    """As ``metered`` without holding, for pipelined requests: ``request`` is admitted
    (waiting out the tenant's debt) and ``start(request)`` called now, so requests started
    one after another begin their work in that order; the returned awaitable gives
    (response, throttle ms) once the work is done."""
    claims = claims_of(request)
    waited_s = await quotas.admit(claims)
    try:
        started = start(request)
    except BaseException:
        quotas.release(claims)
        raise

    async def finish() -> tuple[Any, int]:
        try:
            response = await started
        finally:
            quotas.release(claims)
        usage = usage_of(request, response)
        return response, await settle(quotas, usage, response, waited_s, hold=False)

    return asyncio.ensure_future(finish())


async def settle(
    quotas: QuotaManager, usage: Usage, response: Any, waited_s: float = 0.0, hold: bool = True
) -> int:
    """Charge ``usage``; set the response's ``throttle_ms`` where it has one; hold it;
    return the throttle in ms. Held, the throttle is both holds, from when the request
    was sent. Not held (``hold=False``, Kafka's way), it is only the debt still ahead:
    the client backs off by it before its next request, and the wait already served
    before this one ran must not be served twice."""
    throttle = quotas.charge(usage, waited_s)
    told = Throttle(
        waited_s + throttle.seconds if hold else throttle.seconds, throttle.tenant, throttle.kind
    )
    if told.seconds > 0 and "throttle_ms" in response.DESCRIPTOR.fields_by_name:
        response.throttle_ms = told.ms
    if hold:
        await quotas.hold(throttle, waited_s)
    return told.ms if told.seconds > 0 else 0
