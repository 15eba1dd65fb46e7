"""How the Kafka listener calls the broker's own services in process.

Every Kafka request runs through the same servicers as its gRPC counterpart (the
``BrokerServicer``, ``GroupServicer`` and ``AdminServicer`` methods: readiness, metrics
under the RPC's name, authorization guards, the handlers), under the caller's
``Principal`` (``principal.current()``) and through the same quota gate
(``throttling.metered``), so nothing a gRPC client is held to is skipped for a Kafka
client. A servicer ends a refused call with ``context.abort``; ``CallContext.abort``
raises the typed ``MeridianError`` instead, which the Kafka handler answers with Kafka's
code for it (``codes.kafka_code``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from dataplane.errors import ERROR_METADATA_KEY, ErrorCode, MeridianError


class CallContext:
    """The servicer context of an in-process call from a Kafka connection."""

    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        """The Kafka client's address, as gRPC names peers (``ipv4:1.2.3.4:5``)."""
        return self._peer

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(
        self, code: object, details: str = "", trailing_metadata: Sequence[tuple[str, str]] = ()
    ) -> NoReturn:
        names = [v for k, v in trailing_metadata if k == ERROR_METADATA_KEY]
        value = ErrorCode.Value(names[0]) if names else ErrorCode.UNKNOWN_SERVER_ERROR
        raise MeridianError(value, details)


def grpc_peer(host: str, port: int) -> str:
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
