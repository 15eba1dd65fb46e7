"""``KafkaListener``: Kafka's wire protocol on a TCP port of its own, beside gRPC.

One asyncio server (TLS when the broker's gRPC listener has it: SASL_SSL, else
SASL_PLAINTEXT, or PLAINTEXT with authentication off). Each connection reads frames
(``wire``) and answers them strictly in request order. Produce requests are pipelined: up
to ``MAX_IN_FLIGHT`` of them are started (their appends begun, in the order sent) while
earlier ones are still being written and replicated, and answered in order as they
finish; any other request waits until every earlier answer is out, then runs alone, as
a Kafka broker serves it. Every request runs as the connection's ``Principal`` through the
broker's own servicers (``calls``, ``data``, ``groups``).

Authentication (when the broker verifies tokens): before SASL succeeds only ApiVersions,
SaslHandshake and SaslAuthenticate are answered, each frame at most
``MAX_UNAUTHENTICATED_FRAME_BYTES``; any other request closes the connection, as Kafka
closes it. SaslAuthenticate answers ``session_lifetime_ms`` (the token's remaining life),
so clients re-authenticate on the same connection before it ends (KIP-368). Every later
request checks the token again (expiry, a deleted account or tenant, changed roles: the
controller's last push, as for gRPC) and a connection whose token no longer holds is
closed; the client reconnects with fresh credentials. A failed authentication is answered
SASL_AUTHENTICATION_FAILED with the reason after ``AUTH_FAILURE_DELAY_S``, then closed.

Bounds against clients that hold resources: connections idle for ``IDLE_TIMEOUT_S``
(Kafka's ``connections.max.idle.ms``), whose next frame does not arrive whole within
``FRAME_READ_TIMEOUT_S``, or not authenticated within ``kafka_auth_timeout_ms`` of their
accept are closed; at most ``kafka_max_connections`` are kept, and
``kafka_max_connections_per_ip`` from one address (a connection over either is closed at
once); a frame of any API but Produce is at most ``MAX_OTHER_FRAME_BYTES`` (its
message is decoded on the event loop), a Produce frame ``max_request_bytes`` plus
``FRAME_OVERHEAD_BYTES``.

A connection closed by the broker first writes the answers of the Produce requests it
already started (within ``DRAIN_TIMEOUT_S``), so a client is never left to retry a
write that was done. A failed ``acks=0`` Produce (unanswered by Kafka's rule) closes the
connection, as Kafka closes it, so the client refreshes its metadata.
``stop`` closes the port and every connection; a request being served is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dataplane.broker.auth import Authenticator, Principal
from dataplane.broker.auth.principal import reset_current, set_current
from dataplane.broker.config import BrokerConfig, parse_address
from dataplane.broker.kafka import codes, data, groups, sasl, txns, wire
from dataplane.broker.kafka.calls import CallContext, grpc_peer
from dataplane.broker.metrics import BrokerMetrics
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 600.0
FRAME_READ_TIMEOUT_S = 60.0  # from a frame's size to its last byte
DRAIN_TIMEOUT_S = 30.0  # for started answers when the broker closes a connection
AUTH_FAILURE_DELAY_S = 0.5
MAX_UNAUTHENTICATED_FRAME_BYTES = 512 * 1024  # Kafka's sasl.server.max.receive.size
MAX_OTHER_FRAME_BYTES = 1024 * 1024  # any request but Produce
FRAME_OVERHEAD_BYTES = 1024 * 1024  # headers and names around a request's record bytes
KAFKA_METHOD = "/kafka"  # the method name tokens are authenticated for
MAX_IN_FLIGHT = 16  # pipelined Produce requests of one connection (librdkafka sends 5)

Handler = Callable[[wire.Request, CallContext], Awaitable[dict[str, Any] | None]]


class KafkaListener:
    """See the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        data_services: data.DataServices,
        group_services: groups.GroupServices,
        metrics: BrokerMetrics,
        authenticator: Authenticator | None,
        txn_services: txns.TxnServices,
    ) -> None:
        self.config = config
        self.data = data_services
        self.metrics = metrics
        self.authenticator = authenticator
        self.max_frame_bytes = config.max_request_bytes + FRAME_OVERHEAD_BYTES
        self.plain = sasl.PlainExchange(config.plain_token_url) if config.plain_token_url else None
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._per_ip: dict[str, int] = {}
        d, g, t = data_services, group_services, txn_services
        self.handlers: dict[int, Handler] = {
            0: lambda r, c: data.produce(d, r, c),
            1: lambda r, c: data.fetch(d, r, c),
            2: lambda r, c: data.list_offsets(d, r, c),
            3: lambda r, c: data.metadata(d, r, c),
            8: lambda r, c: groups.offset_commit(g, r, c),
            9: lambda r, c: groups.offset_fetch(g, r, c),
            10: lambda r, c: txns.find_coordinator(t, g, r, c),
            11: lambda r, c: groups.join_group(g, r, c),
            12: lambda r, c: groups.heartbeat(g, r, c),
            13: lambda r, c: groups.leave_group(g, r, c),
            14: lambda r, c: groups.sync_group(g, r, c),
            15: lambda r, c: groups.describe_groups(g, r, c),
            16: lambda r, c: groups.list_groups(g, r, c),
            18: self._api_versions,
            19: lambda r, c: data.create_topics(d, r, c),
            20: lambda r, c: data.delete_topics(d, r, c),
            22: lambda r, c: txns.init_producer_id(t, d, r, c),
            24: lambda r, c: txns.add_partitions(t, r, c),
            25: lambda r, c: txns.add_offsets(t, r, c),
            26: lambda r, c: txns.end_txn(t, r, c),
            28: lambda r, c: txns.txn_offset_commit(t, r, c),
            32: lambda r, c: data.describe_configs(d, r, c),
            42: lambda r, c: groups.delete_groups(g, r, c),
        }
        assert set(self.handlers) | wire.SASL_KEYS == set(wire.APIS)

    @property
    def mechanisms(self) -> list[str]:
        if self.authenticator is None:
            return []
        return [sasl.OAUTHBEARER, *([sasl.PLAIN] if self.plain is not None else [])]

    async def start(self) -> int:
        host, port = parse_address(self.config.kafka_listen, "kafka_listen")
        self._server = await asyncio.start_server(
            self._accept, host, port, ssl=self._tls(), reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("Kafka listener on %s:%s (%s)", host, self.port, self.security_protocol)
        return self.port

    @property
    def security_protocol(self) -> str:
        tls = self.config.tls_enabled
        if self.authenticator is None:
            return "SSL" if tls else "PLAINTEXT"
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"

    def _tls(self) -> ssl.SSLContext | None:
        if not self.config.tls_enabled:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(Path(self.config.tls_cert_file), Path(self.config.tls_key_file))
        return context

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        if self.plain is not None:
            self.plain.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        ip = str((writer.get_extra_info("peername") or ("",))[0])
        if not self._admit(ip):
            self.metrics.kafka_refused("limit")
            writer.close()
            return
        self._connections.add(task)
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        self.metrics.kafka_connections.inc()
        try:
            await Connection(self, reader, writer).run()
        except asyncio.CancelledError:
            pass
        finally:
            self.metrics.kafka_connections.dec()
            self._connections.discard(task)
            left = self._per_ip.pop(ip, 1) - 1
            if left:
                self._per_ip[ip] = left
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _admit(self, ip: str) -> bool:
        """Whether a new connection from ``ip`` fits the listener's bounds."""
        return (
            len(self._connections) < self.config.kafka_max_connections
            and self._per_ip.get(ip, 0) < self.config.kafka_max_connections_per_ip
        )

    async def _api_versions(self, req: wire.Request, ctx: CallContext) -> dict[str, Any]:
        return {"error_code": codes.NONE, "api_keys": wire.api_keys(), "throttle_time_ms": 0}


class _CloseError(Exception):
    """End the connection (after what was written)."""


class Connection:
    """One client connection: its SASL state and its request loop."""

    def __init__(
        self, listener: KafkaListener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.listener = listener
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("", 0)
        self.context = CallContext(grpc_peer(str(peer[0]), int(peer[1])))
        self.mechanism = ""
        self.token = ""
        self.principal: Principal | None = None
        # The answers of started Produce requests, in request order: each writes its
        # answer once the one before it is written.
        self._last_write: asyncio.Future[None] | None = None
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._writes: set[asyncio.Future[None]] = set()
        self._auth_deadline = time.monotonic() + listener.config.kafka_auth_timeout_ms / 1000

    @property
    def authenticated(self) -> bool:
        return self.listener.authenticator is None or self.principal is not None

    async def run(self) -> None:
        drain = False
        try:
            while True:
                frame = await self._read_frame()
                await self._serve(frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client went away
        except (wire.FrameError, _CloseError, TimeoutError) as exc:
            reason = {wire.FrameError: "malformed", TimeoutError: "timeout"}.get(
                type(exc), "refused"
            )
            log.info("closing Kafka connection from %s (%s): %s", self.context.peer(), reason, exc)
            self.listener.metrics.kafka_refused(reason)
            drain = True
        except Exception:
            log.exception("closing Kafka connection from %s", self.context.peer())
            self.listener.metrics.kafka_refused("error")
            drain = True
        finally:
            if drain and self._writes:
                await asyncio.wait(set(self._writes), timeout=DRAIN_TIMEOUT_S)
            for write in self._writes:
                write.cancel()
            if self._writes:
                await asyncio.gather(*self._writes, return_exceptions=True)

    async def _read_frame(self) -> bytes:
        """The next frame (after its size). ``TimeoutError`` when the connection stayed
        idle, or a frame or the authentication took too long."""
        head = await asyncio.wait_for(self.reader.readexactly(4), self._timeout(IDLE_TIMEOUT_S))
        (size,) = wire.SIZE.unpack(head)
        wire.check_size(size, self._frame_bound(wire.PRODUCE_KEY))
        deadline = time.monotonic() + self._timeout(FRAME_READ_TIMEOUT_S)
        key = await asyncio.wait_for(self.reader.readexactly(2), deadline - time.monotonic())
        wire.check_size(size, self._frame_bound(int.from_bytes(key, "big", signed=True)))
        rest = await asyncio.wait_for(
            self.reader.readexactly(size - 2), max(0.0, deadline - time.monotonic())
        )
        return key + rest

    def _timeout(self, seconds: float) -> float:
        if self.authenticated:
            return seconds
        return max(0.0, min(seconds, self._auth_deadline - time.monotonic()))

    def _frame_bound(self, api_key: int) -> int:
        """The largest frame of ``api_key`` this connection may send now."""
        if not self.authenticated:
            return MAX_UNAUTHENTICATED_FRAME_BYTES
        if api_key == wire.PRODUCE_KEY:
            return self.listener.max_frame_bytes
        return MAX_OTHER_FRAME_BYTES

    async def _serve(self, frame: bytes) -> None:
        try:
            request = wire.decode_request(frame)
        except wire.UnsupportedApiError as exc:
            if exc.api_key != wire.API_VERSIONS_KEY:
                raise _CloseError(str(exc)) from None
            await self._written()
            await self._write(
                wire.unsupported_versions_response(exc.correlation_id, codes.UNSUPPORTED_VERSION)
            )
            return
        started = time.perf_counter()
        if request.api.key == wire.PRODUCE_KEY and self.authenticated:
            await self._start_produce(request, started)
            return
        await self._written()
        values = await self._answer(request)
        self.listener.metrics.observe_kafka(request.api.name, time.perf_counter() - started)
        if values is not None:
            await self._write(wire.encode_response(request, values))

    async def _start_produce(self, request: wire.Request, started: float) -> None:
        """Start a Produce now and queue its answer behind the earlier ones."""
        await self._slots.acquire()
        try:
            principal = await self._recheck()
            token = set_current(principal)
            try:
                answer = await data.start_produce(self.listener.data, request, self.context)
            finally:
                reset_current(token)
        except BaseException:
            self._slots.release()
            raise
        before = self._last_write
        write = asyncio.ensure_future(self._answer_in_turn(request, started, answer, before))
        self._last_write = write
        self._writes.add(write)
        write.add_done_callback(self._write_done)

    def _write_done(self, write: asyncio.Future[None]) -> None:
        self._writes.discard(write)
        if not write.cancelled() and write.exception() is not None:
            # The client went away mid-answer: the next read ends the connection.
            log.debug("Kafka answer to %s not written: %r", self.context.peer(), write.exception())

    async def _answer_in_turn(
        self,
        request: wire.Request,
        started: float,
        answer: Awaitable[dict[str, Any] | None],
        before: asyncio.Future[None] | None,
    ) -> None:
        try:
            try:
                values = await answer
            finally:
                if before is not None:
                    await before
            self.listener.metrics.observe_kafka(request.api.name, time.perf_counter() - started)
            if values is not None:
                await self._write(wire.encode_response(request, values))
        except data.AcksZeroRefused as exc:
            log.info("closing Kafka connection from %s: %s", self.context.peer(), exc)
            self.listener.metrics.kafka_refused("refused")
            self.writer.close()
        finally:
            self._slots.release()

    async def _written(self) -> None:
        """Until every started Produce is answered (raising what ended its write)."""
        if self._last_write is not None:
            last, self._last_write = self._last_write, None
            await last

    async def _write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def _answer(self, request: wire.Request) -> dict[str, Any] | None:
        key = request.api.key
        if key in wire.SASL_KEYS:
            return await self._sasl(request)
        if key == wire.API_VERSIONS_KEY:
            return await self.listener.handlers[key](request, self.context)
        if not self.authenticated:
            raise _CloseError(f"{request.api.name} before SASL authentication")
        principal = await self._recheck()
        token = set_current(principal)
        try:
            return await self.listener.handlers[key](request, self.context)
        finally:
            reset_current(token)

    async def _recheck(self) -> Principal | None:
        authenticator = self.listener.authenticator
        if authenticator is None:
            return None
        try:
            again = await authenticator.authenticate(KAFKA_METHOD, _bearer(self.token))
        except MeridianError as exc:
            raise _CloseError(f"its credentials no longer hold: {exc.message}") from None
        if again != self.principal:
            raise _CloseError("its credentials changed since it authenticated: reconnect")
        return again

    # -- SASL -----------------------------------------------------------------------------
    async def _sasl(self, request: wire.Request) -> dict[str, Any]:
        if request.api.name == "SaslHandshake":
            return await self._handshake(request)
        if not self.mechanism:
            raise _CloseError("SaslAuthenticate before SaslHandshake")
        mechanism, self.mechanism = self.mechanism, ""
        try:
            token = await self._token(mechanism, bytes(request.body.auth_bytes or b""))
            principal = await self._verify(token)
        except (sasl.SaslError, MeridianError) as exc:
            if isinstance(exc, MeridianError) and exc.code == ErrorCode.BROKER_NOT_AVAILABLE:
                # Not the client's fault: closed unanswered, it reconnects and tries again
                # (an answered failure is final to Kafka's clients).
                self.listener.metrics.kafka_authenticated(mechanism, "unavailable")
                raise _CloseError(f"authentication not possible now: {exc.message}") from None
            message = _refusal(mechanism, exc)
            self.listener.metrics.kafka_authenticated(mechanism, "refused")
            await asyncio.sleep(AUTH_FAILURE_DELAY_S)
            answer = {
                "error_code": codes.SASL_AUTHENTICATION_FAILED,
                "error_message": message,
                "auth_bytes": b"",
                "session_lifetime_ms": 0,
            }
            await self._write(wire.encode_response(request, answer))
            raise _CloseError(f"authentication failed: {message}") from None
        if self.principal is not None and principal.subject != self.principal.subject:
            raise _CloseError("re-authentication as another identity")
        self.token, self.principal = token, principal
        self.listener.metrics.kafka_authenticated(mechanism, "ok")
        lifetime_ms = max(0, int(principal.expires_at * 1000 - time.time() * 1000))
        return {
            "error_code": codes.NONE,
            "error_message": None,
            "auth_bytes": b"",
            "session_lifetime_ms": lifetime_ms,
        }

    async def _handshake(self, request: wire.Request) -> dict[str, Any]:
        offered = self.listener.mechanisms
        wanted = request.body.mechanism
        if wanted not in offered:
            await self._write(
                wire.encode_response(
                    request, {"error_code": codes.UNSUPPORTED_SASL_MECHANISM, "mechanisms": offered}
                )
            )
            raise _CloseError(f"SASL mechanism {wanted!r} is not offered ({offered})")
        self.mechanism = wanted
        return {"error_code": codes.NONE, "mechanisms": offered}

    async def _token(self, mechanism: str, auth_bytes: bytes) -> str:
        if mechanism == sasl.OAUTHBEARER:
            return sasl.oauthbearer_token(auth_bytes)
        client_id, secret = sasl.plain_credentials(auth_bytes)
        assert self.listener.plain is not None
        return await self.listener.plain.token(client_id, secret)

    async def _verify(self, token: str) -> Principal:
        authenticator = self.listener.authenticator
        assert authenticator is not None
        return await authenticator.authenticate(KAFKA_METHOD, _bearer(token))


def _refusal(mechanism: str, exc: sasl.SaslError | MeridianError) -> str:
    """What a refused client is told: why its message or token is wrong, never what the
    issuer answered the broker (its address, its error pages)."""
    if isinstance(exc, sasl.SaslError):
        return str(exc)
    if mechanism == sasl.PLAIN:
        return "the client id or secret was refused"
    return exc.message


def _bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]
