"""``databus.Client``: write to a Databus agent from Python in a line.

    from databus import Client
    with Client("unix:/run/databus/databus.sock", token_file="/run/databus/ingest-token") as bus:
        bus.write("clicks", b'{"user": 42}', key=b"42")
        bus.write_many("clicks", [(b"k1", b"v1"), (b"k2", b"v2")], lane="ppe")

A write's records are accepted together or not at all; the answer says how
(``delivery``: ``ack_on_spool`` once durably spooled, ``ack_on_broker`` once on the
brokers). A refusal raises ``DatabusError`` with the agent's ``kind``: ``invalid``,
``too_large``, ``unknown_stream``, ``spool_full`` (try later), ``unavailable``,
``unauthenticated`` or ``timeout`` (``ack_on_broker`` only: the write is spooled and
will be delivered; do not send it again). Thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import databus_pb2, databus_pb2_grpc

Bytes = bytes | bytearray | memoryview
HeadersIn = Mapping[str, Bytes | str | None] | Sequence[tuple[str, Bytes | str | None]]


class DatabusError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class WriteResult:
    accepted: int
    delivery: str
    config_version: int


class Client:
    def __init__(
        self,
        target: str = "127.0.0.1:8471",
        *,
        token: str | None = None,
        token_file: str | Path | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        if token is None and token_file is not None:
            token = Path(token_file).read_text().strip()
        if not token:
            raise ValueError("give the agent's ingest token (token= or token_file=)")
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._channel = grpc.insecure_channel(
            target, options=[("grpc.max_send_message_length", 16 * 1024 * 1024)]
        )
        self._stub = databus_pb2_grpc.DatabusStub(self._channel)
        self.timeout_s = timeout_s

    def write(
        self,
        stream: str,
        value: Bytes | str | None,
        *,
        key: Bytes | str | None = None,
        headers: HeadersIn | None = None,
        lane: str | None = None,
        timestamp_ms: int | None = None,
    ) -> WriteResult:
        return self.write_many(stream, [(key, value, headers, timestamp_ms)], lane=lane)

    def write_many(
        self, stream: str, records: Iterable[Any], *, lane: str | None = None
    ) -> WriteResult:
        """Records are values, or ``(key, value[, headers[, timestamp_ms]])`` tuples."""
        request = databus_pb2.WriteRequest(
            stream=stream, lane=lane or "", records=[_record(r) for r in records]
        )
        try:
            answer = self._stub.Write(request, metadata=self._metadata, timeout=self.timeout_s)
        except grpc.RpcError as err:
            kind = (
                dict(err.trailing_metadata() or ()).get("databus-error") or err.code().name.lower()
            )
            raise DatabusError(str(kind), err.details() or "") from None
        return WriteResult(answer.accepted, answer.delivery, answer.config_version)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bytes(value: Bytes | str | None) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)


def _record(item: Any) -> databus_pb2.DatabusRecord:
    if not isinstance(item, tuple):
        item = (None, item)
    key, value = item[0], item[1]
    headers = item[2] if len(item) > 2 and item[2] else ()
    timestamp = item[3] if len(item) > 3 else None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    record = databus_pb2.DatabusRecord(
        headers=[databus_pb2.DatabusHeader(key=k, value=_bytes(v)) for k, v in pairs]
    )
    if key is not None:
        record.key = key.encode() if isinstance(key, str) else bytes(key)
    if value is not None:
        record.value = value.encode() if isinstance(value, str) else bytes(value)
    if timestamp is not None:
        record.timestamp_ms = timestamp
    return record
