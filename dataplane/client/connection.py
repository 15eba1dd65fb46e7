"""Channels to brokers, one per address, shared by every client of a process part.

A ``Connection`` bundles the stubs of one broker; a ``ConnectionPool`` opens them lazily
and reuses them. Messages up to ``MAX_MESSAGE_BYTES`` pass both ways.

``ChannelSecurity`` is how every channel to a broker is opened: TLS (``tls``: a CA file
path, or True for the system's roots; None/False: plaintext) and the bearer token of a
token source (``dataplane.client.auth``) on every call.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from dataplane._gen.meridian.v1 import admin_pb2_grpc, broker_pb2_grpc, group_pb2_grpc
from dataplane.client.auth import BearerInterceptor, Credentials, TokenSource, aio_interceptors
from dataplane.client.auth import token_source as as_token_source
from dataplane.errors import ErrorCode, MeridianError

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.enable_retries", 0),
    # Each channel its own connections: a channel opened anew after a failure (as the
    # clients do once a broker fails) reaches a restarted broker at once, instead of
    # inheriting the reconnect backoff of the shared connection to its dead process.
    ("grpc.use_local_subchannel_pool", 1),
]


Tls = str | Path | bool | None

# A channel dropped after a failure is closed once no call can still be using it: every
# call on it began before it was dropped, and the SDK's calls end by their deadlines
# (30 s by default; a JoinGroup's is its rebalance timeout plus 30 s), so after
# RETIRED_GRACE_S it is idle. At most MAX_RETIRED wait meanwhile (the oldest is closed
# first): a client facing a dead broker for hours drops a channel at every retry, and
# must not keep them all.
RETIRED_GRACE_S = 300.0
MAX_RETIRED = 32


@dataclass(frozen=True)
class ChannelSecurity:
    """Transport security and credentials of channels to brokers (see the module
    docstring). ``ChannelSecurity.of(credentials, tls)`` checks and reads them once."""

    tokens: TokenSource | None = None
    root_certificates: bytes | None = None
    tls: bool = False

    @classmethod
    def of(cls, credentials: Credentials = None, tls: Tls = None) -> ChannelSecurity:
        roots = None
        if isinstance(tls, str | Path):
            try:
                roots = Path(tls).read_bytes()
            except OSError as exc:
                raise MeridianError(
                    ErrorCode.INVALID_CONFIG, f"cannot read the TLS CA file {tls}: {exc}"
                ) from None
        return cls(as_token_source(credentials), roots, bool(tls))

    def _credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.root_certificates)

    def channel(self, address: str, options: Any = None) -> grpc.Channel:
        """A blocking channel to ``address``."""
        options = CHANNEL_OPTIONS if options is None else options
        if self.tls:
            channel = grpc.secure_channel(address, self._credentials(), options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        if self.tokens is not None:
            channel = grpc.intercept_channel(channel, BearerInterceptor(self.tokens))
        return channel

    def aio_channel(self, address: str, options: Any = None) -> grpc.aio.Channel:
        """An asyncio channel to ``address`` (open it on the loop that uses it)."""
        options = CHANNEL_OPTIONS if options is None else options
        interceptors = aio_interceptors(self.tokens) if self.tokens is not None else None
        if self.tls:
            return grpc.aio.secure_channel(
                address, self._credentials(), options=options, interceptors=interceptors
            )
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)


PLAINTEXT = ChannelSecurity()


@dataclass(frozen=True)
class Connection:
    address: str
    channel: grpc.Channel
    broker: broker_pb2_grpc.BrokerStub
    group: group_pb2_grpc.GroupCoordinatorStub
    admin: admin_pb2_grpc.AdminStub


def parse_bootstrap(bootstrap: str | Iterable[str]) -> list[str]:
    """``"h1:p1,h2:p2"`` or a list of ``host:port`` strings, checked."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = [item.strip() for item in items if item.strip()]
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise MeridianError(ErrorCode.INVALID_REQUEST, f"bad broker address {address!r}")
    if not addresses:
        raise MeridianError(ErrorCode.INVALID_REQUEST, "no bootstrap address given")
    return addresses


class ConnectionPool:
    """One channel per broker address, opened on first use; thread-safe."""

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        client_id: str = "meridian",
        security: ChannelSecurity = PLAINTEXT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.security = security
        self._clock = clock
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}
        # Dropped by forget(), oldest first, with the time each was dropped.
        self._retired: deque[tuple[float, Connection]] = deque()
        self._closed = False

    def get(self, address: str) -> Connection:
        with self._lock:
            if self._closed:
                raise MeridianError(ErrorCode.INVALID_REQUEST, "the client is closed")
            conn = self._connections.get(address)
            if conn is None:
                channel = self.security.channel(address)
                conn = Connection(
                    address,
                    channel,
                    broker_pb2_grpc.BrokerStub(channel),
                    group_pb2_grpc.GroupCoordinatorStub(channel),
                    admin_pb2_grpc.AdminStub(channel),
                )
                self._connections[address] = conn
            return conn

    def forget(self, address: str) -> None:
        """Drop the channel to ``address`` (after it failed); the next ``get`` reopens.

        The old channel stays open for ``RETIRED_GRACE_S``: other threads may still be
        calling on it, and a closed channel fails their calls with a ``ValueError``
        instead of a status. Then it is closed, or sooner once more than ``MAX_RETIRED``
        dropped channels wait (the oldest first), and at the latest when the pool closes.
        """
        with self._lock:
            conn = self._connections.pop(address, None)
            if conn is not None:
                self._retired.append((self._clock(), conn))
            expired = self._expired_locked()
        for old in expired:
            old.channel.close()

    def _expired_locked(self) -> list[Connection]:
        """Take the dropped channels due for closing (the caller closes them)."""
        horizon = self._clock() - RETIRED_GRACE_S
        expired = []
        while self._retired and (
            len(self._retired) > MAX_RETIRED or self._retired[0][0] <= horizon
        ):
            expired.append(self._retired.popleft()[1])
        return expired

    @property
    def retired_channels(self) -> int:
        """How many dropped channels are still open."""
        with self._lock:
            return len(self._retired)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = list(self._connections.values()), {}
            connections += [conn for _, conn in self._retired]
            self._retired.clear()
        for conn in connections:
            conn.channel.close()

    def __enter__(self) -> ConnectionPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
