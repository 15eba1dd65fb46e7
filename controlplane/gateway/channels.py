"""Channels from the control plane to brokers, one per (process, address).

A channel is opened with ``broker_security()`` — TLS when ``BROKER_TLS_CA_FILE`` is set,
the controller's token on every call when ``BROKER_AUTH`` is on — and with reconnect
backoff capped at a second, so a restarted broker is heard from at the next call rather
than after gRPC's default backoff (up to two minutes). A forked worker never reuses its
parent's channels (the key holds the process id), and a channel opened with other
credentials or TLS roots than the current ones (a new identity provider, a rotated CA
file) is replaced rather than reused. After a transport failure the caller drops the
channel (``drop_channel``) so the next call reconnects at once.

Thread-safe.
"""

from __future__ import annotations

import os
import threading

import grpc
from django.conf import settings

from controlplane.accounts.internal import controller_tokens
from dataplane._gen.meridian.v1 import (
    admin_pb2_grpc,
    broker_pb2_grpc,
    delay_pb2_grpc,
    group_pb2_grpc,
)
from dataplane.client.connection import CHANNEL_OPTIONS, ChannelSecurity
from dataplane.errors import MeridianError

OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

_channels: dict[tuple[int, str], tuple[ChannelSecurity, grpc.Channel]] = {}
_lock = threading.Lock()


def broker_security() -> ChannelSecurity:
    """TLS and credentials of the control plane's channels to brokers."""
    tokens = controller_tokens() if settings.BROKER_AUTH else None
    return ChannelSecurity.of(tokens, settings.BROKER_TLS_CA_FILE or None)


def open_channel(address: str) -> grpc.Channel:
    """A new blocking channel to the broker at ``address`` (the caller closes it)."""
    return broker_security().channel(address, OPTIONS)


def _pooled(address: str) -> grpc.Channel:
    key = (os.getpid(), address)
    try:
        security = broker_security()
    except MeridianError:  # the CA file unreadable a moment (being replaced)
        with _lock:
            pooled = _channels.get(key)
        if pooled is None:
            raise
        return pooled[1]  # keep what worked until it can be read again
    stale = None
    with _lock:
        pooled = _channels.get(key)
        if pooled is not None and pooled[0] == security:
            return pooled[1]
        if pooled is not None:
            stale = pooled[1]
        channel = security.channel(address, OPTIONS)
        _channels[key] = (security, channel)
    if stale is not None:
        stale.close()
    return channel


def admin_stub(address: str) -> admin_pb2_grpc.AdminStub:
    """An Admin stub on the pooled channel to ``address`` (non-empty)."""
    return admin_pb2_grpc.AdminStub(_pooled(address))


def group_stub(address: str) -> group_pb2_grpc.GroupCoordinatorStub:
    """A GroupCoordinator stub on the pooled channel to ``address`` (non-empty): the
    control plane reads groups (to chart their lag) with its internal token."""
    return group_pb2_grpc.GroupCoordinatorStub(_pooled(address))


def broker_stub(address: str) -> broker_pb2_grpc.BrokerStub:
    """A Broker stub on the pooled channel to ``address`` (non-empty): the control plane
    asks leaders ``ListOffsets`` (the age of a group's oldest unconsumed record)."""
    return broker_pb2_grpc.BrokerStub(_pooled(address))


def delay_stub(address: str) -> delay_pb2_grpc.DelayStub:
    """A Delay stub on the pooled channel to ``address`` (non-empty): the control plane
    counts, lists and cancels tenants' delayed records with its internal token."""
    return delay_pb2_grpc.DelayStub(_pooled(address))


def drop_channel(address: str) -> None:
    """Close and forget the pooled channel to ``address`` (if any)."""
    with _lock:
        pooled = _channels.pop((os.getpid(), address), None)
    if pooled is not None:
        pooled[1].close()


def close_channels() -> None:
    """Close every pooled channel of this process."""
    with _lock:
        mine = [key for key in _channels if key[0] == os.getpid()]
        channels = [_channels.pop(key)[1] for key in mine]
    for channel in channels:
        channel.close()
