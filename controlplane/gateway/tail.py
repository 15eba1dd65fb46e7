"""Reading the unsealed tail of a partition through its leader, for the index query:
the records from an offset up to the high watermark as it was when the read began.

The control plane reads with its own channel security (``channels.broker_security``:
TLS and the controller's token), so the caller decides what may be read:
``tail_reader`` serves only the topics it is given (the index's topic and lane topics)
and raises ``TailRefused`` for any other. Every read is bounded: at most
``FETCH_MAX_BYTES`` per call and ``TAIL_MAX_BYTES`` per partition read (past it,
``TailTooLarge``: the index should be built further first); control batches are
skipped, as consumers skip them. Failures leave as the gateway's typed errors
(``BrokerUnavailable`` when retrying may help, ``BrokerRefusedError`` when not).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence

import grpc
from django.conf import settings

from controlplane.core.errors import InvalidRequest
from controlplane.gateway.channels import broker_security
from controlplane.gateway.errors import BrokerRefusedError, BrokerUnavailable
from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client.connection import ConnectionPool
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.offsets import LATEST, list_offsets
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from dataplane.records import Record
from dataplane.records.decoder import decode_batch
from dataplane.records.layout import HEADER_SIZE, HEADER_STRUCT, LOG_OVERHEAD

FETCH_MAX_BYTES = 1024 * 1024
TAIL_MAX_BYTES = 64 * 1024 * 1024
_CLIENT_ID = "meridian-controlplane-tail"

TailReader = Callable[[str, int, int], Iterable[Record]]


class TailRefused(InvalidRequest):
    """A topic the reader was not opened for."""

    code = "tail_refused"


class TailTooLarge(InvalidRequest):
    """More than ``TAIL_MAX_BYTES`` of one partition lie past what the index covers."""

    code = "tail_too_large"


def tail_reader(addresses: Sequence[str], topics: Collection[str]) -> TailReader:
    """A reader of ``topics``' tails on the cluster whose brokers are ``addresses``."""
    allowed = frozenset(topics)

    def read(topic: str, partition: int, start_offset: int) -> Iterator[Record]:
        if topic not in allowed:
            raise TailRefused(f"topic {topic!r} is not readable here", topic=topic)
        return _read(addresses, topic, partition, start_offset)

    return read


def _read(addresses: Sequence[str], topic: str, partition: int, start: int) -> Iterator[Record]:
    if not addresses:
        raise BrokerUnavailable("", "the cluster has no broker with an address")
    timeout_s = float(settings.BROKER_RPC_TIMEOUT_S)
    with ConnectionPool(addresses, client_id=_CLIENT_ID, security=broker_security()) as pool:
        metadata = ClusterMetadata(pool, timeout_s=timeout_s)
        try:
            tp = TopicPartition(topic, partition)
            end = list_offsets(metadata, {tp: LATEST}, timeout_s=timeout_s)[tp][0]
            yield from _fetch_until(metadata, topic, partition, start, end, timeout_s)
        except grpc.RpcError as exc:
            raise _typed(addresses, error_from_rpc(exc)) from exc
        except MeridianError as exc:
            raise _typed(addresses, exc) from exc


def _fetch_until(
    metadata: ClusterMetadata, topic: str, partition: int, offset: int, end: int, timeout_s: float
) -> Iterator[Record]:
    read_bytes = 0
    while offset < end:
        data = _fetch(metadata, topic, partition, offset, timeout_s)
        read_bytes += len(data)
        if read_bytes > TAIL_MAX_BYTES:
            raise TailTooLarge(
                f"{topic}/{partition}: more than {TAIL_MAX_BYTES} bytes past the index; "
                "build the index further first",
                topic=topic,
                partition=partition,
            )
        records, next_offset = _records(data, offset, end)
        if next_offset <= offset:
            return  # nothing more to read now (or a batch larger than a fetch)
        yield from records
        offset = next_offset


def _fetch(
    metadata: ClusterMetadata, topic: str, partition: int, offset: int, timeout_s: float
) -> bytes:
    request = broker_pb2.FetchRequest(
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=FETCH_MAX_BYTES,
        replica_id=-1,
        partitions=[
            broker_pb2.FetchPartition(
                topic=topic,
                partition=partition,
                fetch_offset=offset,
                partition_max_bytes=FETCH_MAX_BYTES,
            )
        ],
    )
    response = metadata.connection_for(topic, partition).broker.Fetch(request, timeout=timeout_s)
    for result in response.results:
        if result.partition == partition:
            if result.error != ErrorCode.NONE:
                raise MeridianError(result.error)
            return bytes(result.records)
    raise MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _records(data: bytes, offset: int, end: int) -> tuple[list[Record], int]:
    """The data records of ``data``'s whole batches within ``[offset, end)``, and the
    offset after the last whole batch (``offset`` itself when there is none)."""
    records: list[Record] = []
    position, next_offset = 0, offset
    while position + HEADER_SIZE <= len(data):
        length = HEADER_STRUCT.unpack_from(data, position)[1]
        if position + LOG_OVERHEAD + length > len(data):
            break  # a batch cut by the fetch's byte limit
        header, batch = decode_batch(data, position)
        if not header.is_control:
            records += [r for r in batch if offset <= r.offset < end]
        next_offset = max(next_offset, header.last_offset + 1)
        position += LOG_OVERHEAD + length
    return records, next_offset


def _typed(addresses: Sequence[str], error: MeridianError) -> Exception:
    where = ",".join(addresses)
    if error.retriable:
        return BrokerUnavailable(where, str(error))
    return BrokerRefusedError(f"brokers {where} refused: {error}", address=where,
                              error=error.code_name)  # fmt: skip
