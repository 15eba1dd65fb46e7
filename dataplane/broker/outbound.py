"""Channels from a broker to other brokers (peer metadata, replica fetching).

Every broker-to-broker channel is opened here, so transport security and the broker's own
credentials apply to all of them in one place.
"""

from __future__ import annotations

import grpc

from dataplane.broker.config import BrokerConfig
from dataplane.client.connection import CHANNEL_OPTIONS

PEER_CHANNEL_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def peer_channel(config: BrokerConfig, address: str) -> grpc.aio.Channel:
    """An asyncio channel to the broker at ``address``, for this broker's own calls."""
    del config  # transport security and credentials come from it
    return grpc.aio.insecure_channel(address, options=PEER_CHANNEL_OPTIONS)
