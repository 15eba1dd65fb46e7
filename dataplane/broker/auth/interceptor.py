"""The broker's authentication: a gRPC aio server interceptor.

Every call except the health service's must carry ``authorization: Bearer <JWT>``
metadata. The token is verified (``TokenVerifier``: cached tokens on the event loop, new
ones in a thread of their own) and the call runs with its ``Principal`` as
``principal.current()``. A missing, malformed, expired, forged or foreign token ends the
call with UNAUTHENTICATED (``meridian-error: UNAUTHENTICATED``) and a message saying
why. The internal services (``INTERNAL_SERVICES``: Admin, Replication, TxnMarkers) also
require the internal role: anyone else gets CLUSTER_AUTHORIZATION_FAILED, whatever their
tenant roles — only the control plane and the brokers call them; the one exception is
``Admin.DescribeState`` (``CLIENT_ADMIN_METHODS``), which answers a client about the
topics it may describe and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import grpc.aio

from dataplane.broker.auth.identities import LiveIdentities
from dataplane.broker.auth.principal import Principal, reset_current, set_current
from dataplane.broker.auth.verifier import InvalidToken, JwksUnavailable, TokenVerifier
from dataplane.broker.errors import abort
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

OPEN_SERVICES = ("/grpc.health.v1.Health/",)
INTERNAL_SERVICES = (
    "/meridian.v1.Admin/",
    "/meridian.v1.Replication/",
    "/meridian.v1.TxnMarkers/",
)
# Calls of the internal services a client may make too: the servicer answers a client
# only about the topics it may describe (``guard.describe_state``).
CLIENT_ADMIN_METHODS = ("/meridian.v1.Admin/DescribeState",)
_BEARER = "bearer "


def bearer_token(metadata: Any) -> str:
    """The token of the call's ``authorization`` metadata; UNAUTHENTICATED if none."""
    values = [v for k, v in (metadata or ()) if k == "authorization"]
    if not values:
        raise MeridianError(
            ErrorCode.UNAUTHENTICATED, "no credentials: send 'authorization: Bearer <token>'"
        )
    value = values[0] if isinstance(values[0], str) else values[0].decode(errors="replace")
    if not value.lower().startswith(_BEARER) or not value[len(_BEARER) :].strip():
        raise MeridianError(ErrorCode.UNAUTHENTICATED, "the authorization is not a bearer token")
    return value[len(_BEARER) :].strip()


class Authenticator:
    """Verifies a call's token into a ``Principal`` (see the module docstring)."""

    def __init__(
        self,
        verifier: TokenVerifier,
        threads: int = 2,
        identities: Callable[[], LiveIdentities | None] = lambda: None,
    ) -> None:
        self.verifier = verifier
        self.identities = identities
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="broker-auth")

    async def authenticate(self, method: str, metadata: Any) -> Principal:
        token = bearer_token(metadata)
        principal = self.verifier.cached(token)
        if principal is None:
            loop = asyncio.get_running_loop()
            try:
                principal = await loop.run_in_executor(self._executor, self.verifier.verify, token)
            except InvalidToken as exc:
                raise MeridianError(ErrorCode.UNAUTHENTICATED, str(exc)) from None
            except JwksUnavailable as exc:
                raise MeridianError(ErrorCode.BROKER_NOT_AVAILABLE, str(exc)) from None
        principal = self._bind(principal)
        internal_only = method.startswith(INTERNAL_SERVICES) and method not in CLIENT_ADMIN_METHODS
        if internal_only and not principal.internal:
            raise MeridianError(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                f"{method} is internal to the cluster; {principal.client_id or 'the caller'}"
                " lacks the internal role",
            )
        return principal

    async def recheck(self, method: str, metadata: Any, principal: Principal) -> None:
        """For each request of a client stream: UNAUTHENTICATED once the stream's token
        expired, its account or tenant was deleted, or its roles changed since the
        stream opened (the client opens a new stream with a fresh token)."""
        again = await self.authenticate(method, metadata)
        if again != principal:
            raise MeridianError(
                ErrorCode.UNAUTHENTICATED,
                "the stream's credentials changed since it opened: open a new stream",
            )

    def _bind(self, principal: Principal) -> Principal:
        """The principal as the live identities admit it (every call: a deletion takes
        effect at the next push, although the verified token stays cached)."""
        live = self.identities()
        if live is None:
            return principal
        try:
            return live.bind(principal)
        except InvalidToken as exc:
            raise MeridianError(ErrorCode.UNAUTHENTICATED, str(exc)) from None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Runs every call's behaviour after ``Authenticator.authenticate``."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_SERVICES):
            return handler
        return _wrap(
            handler,
            lambda context: self._principal(method, context),
            lambda context, principal: self.authenticator.recheck(
                method, context.invocation_metadata(), principal
            ),
        )

    async def _principal(self, method: str, context: grpc.aio.ServicerContext) -> Principal:
        try:
            return await self.authenticator.authenticate(method, context.invocation_metadata())
        except MeridianError as exc:
            log.debug("refused %s: %s", method, exc)
            await abort(context, exc)


Authenticate = Callable[[grpc.aio.ServicerContext], Awaitable[Principal]]
Recheck = Callable[[grpc.aio.ServicerContext, Principal], Awaitable[None]]


def _wrap(
    handler: grpc.RpcMethodHandler, authenticate: Authenticate, recheck: Recheck
) -> grpc.RpcMethodHandler:
    serializers = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            _unary(handler.unary_unary, authenticate), **serializers
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _unary(handler.stream_unary, authenticate), **serializers
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            _streaming(handler.unary_stream, authenticate), **serializers
        )
    return grpc.stream_stream_rpc_method_handler(
        _streaming(handler.stream_stream, authenticate, recheck), **serializers
    )


def _unary(behavior: Any, authenticate: Authenticate) -> Any:
    async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
        token = set_current(await authenticate(context))
        try:
            return await behavior(request, context)
        finally:
            with contextlib.suppress(ValueError):
                reset_current(token)

    return run


def _streaming(behavior: Any, authenticate: Authenticate, recheck: Recheck | None = None) -> Any:
    """A streaming call runs as the principal it opened with; with ``recheck`` (client
    streams), every request it reads is checked again first, so a stream outlives
    neither its token nor its account (``MeridianError`` from the request iterator)."""

    async def checked(
        requests: AsyncIterator[Any], context: grpc.aio.ServicerContext, principal: Principal
    ) -> AsyncIterator[Any]:
        assert recheck is not None
        async for request in requests:
            await recheck(context, principal)
            yield request

    async def run(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        principal = await authenticate(context)
        token = set_current(principal)
        if recheck is not None:
            request = checked(request, context, principal)
        try:
            async for response in behavior(request, context):
                yield response
        finally:
            with contextlib.suppress(ValueError):  # finalised in another context
                reset_current(token)

    return run
