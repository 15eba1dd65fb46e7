"""Channels from a broker to other brokers (peer metadata, replica fetching).

Every broker-to-broker channel is opened here, so transport security and the broker's own
credentials apply to all of them in one place: TLS when the broker's listener uses it
(trusting ``tls_ca_file``, or the system's roots), and the token of the broker's own
client credentials (``token_url``, ``client_id``, ``client_secret_file``) on every call,
which peers with authentication on require (it carries the internal role).
"""

from __future__ import annotations

import functools
from pathlib import Path

import grpc

from dataplane.broker.config import BrokerConfig, ConfigError
from dataplane.client.auth import ClientCredentials
from dataplane.client.connection import CHANNEL_OPTIONS, ChannelSecurity

PEER_CHANNEL_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def peer_channel(config: BrokerConfig, address: str) -> grpc.aio.Channel:
    """An asyncio channel to the broker at ``address``, for this broker's own calls."""
    return peer_security(config).aio_channel(address, PEER_CHANNEL_OPTIONS)


def peer_security(config: BrokerConfig) -> ChannelSecurity:
    """The security of this broker's outbound channels (one token source per process)."""
    return _security(
        config.token_url,
        config.client_id,
        config.client_secret_file,
        config.tls_ca_file,
        config.tls_enabled or bool(config.tls_ca_file),
    )


@functools.lru_cache(maxsize=8)
def _security(
    token_url: str, client_id: str, secret_file: str, ca_file: str, tls: bool
) -> ChannelSecurity:
    tokens = None
    if token_url:
        try:
            secret = Path(secret_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"client_secret_file: cannot read {secret_file}: {exc}") from None
        tokens = ClientCredentials(token_url, client_id, secret)
    return ChannelSecurity.of(tokens, (ca_file or True) if tls else None)
