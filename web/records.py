"""Reading and producing a topic's records for the message browser, through the brokers,
with the signed-in user's own access token.

The token is the one sign-in keeps in the session: the brokers verify it and apply
their tenant isolation and the topic's ACLs to it unchanged, exactly as for any SDK
client of that user. The control plane's internal credentials are never used here.

A page is read with a short-lived, bounded reader: one connection pool per page, closed
after it; low-level ``Fetch`` calls (no consumer group, nothing committed) that do not
long-poll; at most ``PAGE_MAX_BYTES`` fetched for a page and ``FETCH_MAX_BYTES`` per
call (a broker always sends a fetch's first batch whole, so one batch larger than that
still comes, bounded by the topic's largest message); every call under the page's
deadline, so a page never hangs on a broker.

Failures leave as ``BrowseError`` with a message fit for a tenant: the error's code name
and what it means, never the transport's details (they name broker addresses).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import grpc
from django.conf import settings
from django.template.defaultfilters import filesizeformat

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client import Producer
from dataplane.client.auth import StaticToken
from dataplane.client.connection import ChannelSecurity, ConnectionPool
from dataplane.client.decoder import decode_records, split_batches
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.offsets import EARLIEST, LATEST, list_offsets
from dataplane.client.types import ConsumerRecord, RecordSource, TopicPartition
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from dataplane.records import TIMESTAMP_TYPE_MASK

PAGE_RECORDS = 100  # at most, per page
PAGE_MAX_BYTES = 1024 * 1024  # fetched for one page, over every partition
FETCH_MAX_BYTES = 64 * 1024  # asked of one partition in one call (a first batch comes whole)
PAGE_DEADLINE_S = 5.0  # everything a page asks of the brokers
CALL_TIMEOUT_S = 3.0  # one call, within the page's deadline
PRODUCE_TIMEOUT_S = 5.0

_REFUSALS: dict[int, str] = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "the brokers refused your access to this topic "
    "(your role or the topic's ACLs do not allow it)",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "the brokers refused your access to this topic",
    ErrorCode.UNAUTHENTICATED: "the brokers did not accept your sign-in; sign in again",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "the brokers do not know this topic or partition "
    "yet (is it still being created?)",
}


class BrowseError(Exception):
    """A read or a produce the brokers refused or could not serve; ``str()`` is fit
    to show a tenant."""

    def __init__(self, code_name: str, explanation: str) -> None:
        super().__init__(f"{explanation} ({code_name})")
        self.code_name = code_name
        self.explanation = explanation


def _browse_error(error: MeridianError) -> BrowseError:
    explanation = _REFUSALS.get(error.code)
    if explanation is None:
        explanation = (
            "the brokers did not answer in time; try again"
            if error.retriable or error.code == ErrorCode.BROKER_NOT_AVAILABLE
            else "the brokers refused the request"
        )
    return BrowseError(error.code_name, explanation)


@dataclass(frozen=True)
class Bounds:
    """A partition's first and next offsets (log start and high watermark)."""

    start: int
    end: int


@dataclass
class Page:
    """Records read for one page, by partition and offset, and where the next page
    starts; ``notes`` say what was cut short (bytes, oversized batches)."""

    records: list[ConsumerRecord] = field(default_factory=list)
    next_positions: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    fetched_bytes: int = 0


class Reader:
    """The bounded reader of one page; a context manager (closes its connections)."""

    def __init__(self, bootstrap: Sequence[str], token: str, topic: str) -> None:
        security = ChannelSecurity.of(StaticToken(token), settings.BROKER_TLS_CA_FILE or None)
        self.topic = topic
        self._pool = ConnectionPool(bootstrap, client_id="meridian-console", security=security)
        self._metadata = ClusterMetadata(self._pool, timeout_s=CALL_TIMEOUT_S)
        self._deadline = time.monotonic() + PAGE_DEADLINE_S

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.close()

    def _left_s(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise _browse_error(MeridianError(ErrorCode.REQUEST_TIMED_OUT))
        return min(left, CALL_TIMEOUT_S)

    def bounds(self, partitions: Iterable[int]) -> dict[int, Bounds]:
        """Each partition's log start and high watermark."""
        tps = [TopicPartition(self.topic, p) for p in partitions]
        starts = self._offsets({tp: EARLIEST for tp in tps})
        ends = self._offsets({tp: LATEST for tp in tps})
        return {tp.partition: Bounds(starts[tp], ends[tp]) for tp in tps}

    def offsets_for_time(self, partitions: Iterable[int], timestamp_ms: int) -> dict[int, int]:
        """The first offset at or after ``timestamp_ms`` per partition (-1: none)."""
        tps = [TopicPartition(self.topic, p) for p in partitions]
        found = self._offsets(dict.fromkeys(tps, timestamp_ms))
        return {tp.partition: found[tp] for tp in tps}

    def _offsets(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        try:
            answer = list_offsets(self._metadata, specs, timeout_s=self._left_s(), backoff_s=0.1)
        except MeridianError as exc:
            raise _browse_error(exc) from None
        return {tp: offset for tp, (offset, _) in answer.items()}

    def read(self, positions: dict[int, int], ends: dict[int, int], per_partition: int) -> Page:
        """Up to ``per_partition`` records of each partition from its position (never
        past its end), within the page's byte budget."""
        page = Page(next_positions=dict(positions))
        got = dict.fromkeys(positions, 0)
        wanting = [p for p in sorted(positions) if positions[p] < ends[p]]
        if len(wanting) > 1:
            self._first_round(page, wanting, ends, per_partition, got)
        for partition in wanting:
            self._read_partition(page, partition, ends[partition], per_partition, got)
        page.records.sort(key=lambda r: (r.partition, r.offset))
        return page

    def _first_round(
        self,
        page: Page,
        partitions: list[int],
        ends: dict[int, int],
        wanted: int,
        got: dict[int, int],
    ) -> None:
        """One ``Fetch`` per leader for all the partitions, the leaders asked at once.
        A partition whose first batch is larger than its share of the budget comes back
        empty (only a response's first batch is sent whole): ``_read_partition`` asks
        again for it alone."""
        share_bytes = max(1, min(FETCH_MAX_BYTES, PAGE_MAX_BYTES // len(partitions)))
        by_leader: dict[str, list[int]] = {}
        try:
            for partition in partitions:
                leader = self._metadata.leader_for(self.topic, partition).address
                by_leader.setdefault(leader, []).append(partition)
            calls = [
                self._pool.get(address).broker.Fetch.future(
                    self._request(led, page.next_positions, share_bytes), timeout=self._left_s()
                )
                for address, led in by_leader.items()
            ]
            responses = [call.result() for call in calls]
        except grpc.RpcError as exc:
            raise _browse_error(error_from_rpc(exc)) from None
        except MeridianError as exc:
            raise _browse_error(exc) from None
        for response in responses:
            for result in response.results:
                if result.partition not in got:
                    continue
                if result.error != ErrorCode.NONE:
                    raise _browse_error(MeridianError(result.error))
                if result.records:
                    page.fetched_bytes += len(result.records)
                    self._take(page, result.partition, result, ends[result.partition], wanted, got)

    def _read_partition(
        self, page: Page, partition: int, end: int, wanted: int, got: dict[int, int]
    ) -> None:
        while got[partition] < wanted and page.next_positions[partition] < end:
            budget = PAGE_MAX_BYTES - page.fetched_bytes
            if budget <= 0:
                page.notes.append(
                    f"This page stopped at {filesizeformat(PAGE_MAX_BYTES)} fetched; "
                    "the next page goes on from there."
                )
                return
            offset = page.next_positions[partition]
            result = self._fetch(partition, offset, min(budget, FETCH_MAX_BYTES))
            page.fetched_bytes += len(result.records)
            if not result.records:
                return  # nothing more here now (the high watermark read earlier)
            if not self._take(page, partition, result, end, wanted, got):
                return

    def _take(
        self,
        page: Page,
        partition: int,
        result: broker_pb2.FetchPartitionResult,
        end: int,
        wanted: int,
        got: dict[int, int],
    ) -> bool:
        """Adds the records of ``result`` the page still wants and moves the partition's
        position; False when the partition can go no further on this page."""
        offset = page.next_positions[partition]
        records, next_offset = self._decode(partition, offset, result)
        if next_offset is None or next_offset <= offset:
            page.notes.append(
                f"Partition {partition}: the batch at offset {offset} is larger than a page reads."
            )
            return False
        records = [r for r in records if r.offset < end][: wanted - got[partition]]
        got[partition] += len(records)
        page.records += records
        full = got[partition] >= wanted and records
        page.next_positions[partition] = records[-1].offset + 1 if full else min(next_offset, end)
        return True

    def _request(
        self, partitions: list[int], positions: dict[int, int], max_bytes: int
    ) -> broker_pb2.FetchRequest:
        return broker_pb2.FetchRequest(
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=max_bytes * len(partitions),
            replica_id=-1,
            partitions=[
                broker_pb2.FetchPartition(
                    topic=self.topic,
                    partition=partition,
                    fetch_offset=positions[partition],
                    partition_max_bytes=max_bytes,
                )
                for partition in partitions
            ],
        )

    def _fetch(
        self, partition: int, offset: int, max_bytes: int
    ) -> broker_pb2.FetchPartitionResult:
        request = self._request([partition], {partition: offset}, max_bytes)
        try:
            leader = self._metadata.connection_for(self.topic, partition)
            response = leader.broker.Fetch(request, timeout=self._left_s())
        except grpc.RpcError as exc:
            raise _browse_error(error_from_rpc(exc)) from None
        except MeridianError as exc:
            raise _browse_error(exc) from None
        for result in response.results:
            if result.partition != partition:
                continue
            if result.error != ErrorCode.NONE:
                raise _browse_error(MeridianError(result.error))
            found: broker_pb2.FetchPartitionResult = result
            return found
        raise _browse_error(MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))

    def _decode(
        self, partition: int, offset: int, result: broker_pb2.FetchPartitionResult
    ) -> tuple[list[ConsumerRecord], int | None]:
        """The records at or after ``offset`` and the offset after the last whole batch;
        None for it when the bytes held no whole batch (one larger than asked for)."""
        assert result.records
        try:
            batches = split_batches(result.records, offset, (self.topic, partition))
        except MeridianError as exc:
            raise _browse_error(exc) from None
        if not batches:
            return [], None
        records: list[ConsumerRecord] = []
        for batch in batches:
            if batch.is_control:
                continue
            source = RecordSource(
                self.topic, partition, (batch.attributes & TIMESTAMP_TYPE_MASK) >> 3, -1
            )
            records += decode_records(batch, source, offset)
        return records, batches[-1].next_offset


def share(records: int, partitions: int) -> int:
    """Records per partition when a page shows ``partitions`` of them."""
    return max(1, math.ceil(records / max(1, partitions)))


@dataclass(frozen=True)
class Produced:
    partition: int
    offset: int


def produce(
    bootstrap: Sequence[str],
    token: str,
    topic: str,
    *,
    value: bytes,
    key: bytes | None,
    headers: list[tuple[str, bytes]],
    partition: int | None,
) -> Produced:
    """One record, acknowledged by every in-sync replica, with the user's token."""
    timeout_ms = PRODUCE_TIMEOUT_S * 1000
    try:
        with Producer(
            list(bootstrap),
            client_id="meridian-console",
            acks="all",
            linger_ms=0,
            retries=2,
            delivery_timeout_ms=timeout_ms,
            request_timeout_ms=timeout_ms,
            max_block_ms=timeout_ms,
            credentials=StaticToken(token),
            tls=settings.BROKER_TLS_CA_FILE or None,
        ) as producer:
            future = producer.send(topic, value, key=key, headers=headers, partition=partition)
            metadata = future.result(timeout=PRODUCE_TIMEOUT_S + 1)
    except MeridianError as exc:
        raise _browse_error(exc) from None
    except TimeoutError:
        raise _browse_error(MeridianError(ErrorCode.REQUEST_TIMED_OUT)) from None
    return Produced(metadata.partition, metadata.offset)
