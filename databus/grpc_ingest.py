"""The agent's gRPC front end (``meridian.v1.Databus``, see ``databus.proto``), on a unix
socket and/or 127.0.0.1. A thin adapter: the ingest token, the conversion of records,
a call into ``Agent.write`` and the mapping of refusals to gRPC statuses
(``KIND_GRPC_STATUS``); the refusal's kind travels as ``databus-error`` trailing
metadata."""

from __future__ import annotations

import hmac
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from databus.agent import Agent
from databus.stream import WriteError, WriteRecord
from dataplane._gen.meridian.v1 import databus_pb2, databus_pb2_grpc

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# An ack_on_broker write holds its thread until the drain commits it: the writes that
# may wait at once.
MAX_WORKERS = 64
KIND_GRPC_STATUS = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
    "unknown_stream": grpc.StatusCode.NOT_FOUND,
    "too_large": grpc.StatusCode.INVALID_ARGUMENT,
    "spool_full": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
    "timeout": grpc.StatusCode.DEADLINE_EXCEEDED,
    "undelivered": grpc.StatusCode.DATA_LOSS,
}
ERROR_METADATA_KEY = "databus-error"


class DatabusServicer(databus_pb2_grpc.DatabusServicer):
    def __init__(self, agent: Agent, token: str) -> None:
        self.agent = agent
        self._token = token.encode()

    def Write(self, request: databus_pb2.WriteRequest, context: Any) -> databus_pb2.WriteResponse:  # noqa: N802
        try:
            self._check_token(context)
            records = [_record(r) for r in request.records]
            accepted, delivery, version = self.agent.write(
                request.stream, records, request.lane or None
            )
        except WriteError as err:
            context.set_trailing_metadata(((ERROR_METADATA_KEY, err.kind),))
            context.abort(KIND_GRPC_STATUS[err.kind], err.message)
        return databus_pb2.WriteResponse(
            accepted=accepted, delivery=delivery, config_version=version
        )

    def _check_token(self, context: Any) -> None:
        for key, value in context.invocation_metadata():
            if key == "authorization":
                scheme, _, token = value.partition(" ")
                if scheme.lower() == "bearer" and hmac.compare_digest(
                    token.strip().encode(), self._token
                ):
                    return
        raise WriteError("unauthenticated", "missing or wrong ingest token")


def _record(record: databus_pb2.DatabusRecord) -> WriteRecord:
    return WriteRecord(
        record.key if record.HasField("key") else None,
        record.value if record.HasField("value") else None,
        [(h.key, h.value if h.HasField("value") else None) for h in record.headers],
        record.timestamp_ms if record.HasField("timestamp_ms") else None,
    )


def create_server(agent: Agent, token: str, addresses: list[str]) -> tuple[grpc.Server, list[int]]:
    """A started server on ``addresses`` (``127.0.0.1:port``, ``unix:/path``); the ports
    bound (0 for a unix socket)."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="databus-grpc"),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ],
    )
    databus_pb2_grpc.add_DatabusServicer_to_server(DatabusServicer(agent, token), server)
    ports = [server.add_insecure_port(address) for address in addresses]
    server.start()
    return server, ports
