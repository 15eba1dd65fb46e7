"""The lag of the groups this broker coordinates on partitions other brokers host.

A coordinator knows its groups' committed offsets but stores only some of their
partitions; the metrics of the others come from their leaders. Every
``group_lag_interval_ms`` (a bounded interval, never per commit) this broker sends each
leader one ``ListOffsets`` naming, per (group, partition), the committed offset as
``record_at``: the answer is the high watermark and the age of the record there (the
leader's offset index finds it). The metrics serve the last answers
(``BrokerMetrics.watch``), so a scrape costs no call; their ages are advanced by the
time since they were asked. A partition no leader answered for is left out until one
does. The snapshot is replaced whole, so the scrape thread reads it without a lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import grpc

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.errors import ErrorCode

log = logging.getLogger(__name__)

LagKey = tuple[str, str, int]  # group, topic, partition
CommittedFn = Callable[[], dict[str, dict[tuple[str, int], int]]]
_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class RemoteLag:
    records: int
    age_ms: int  # by the leader's clock, when asked
    asked_at: float  # this broker's monotonic time of the answer

    def age_ms_now(self, now: float) -> int:
        """The age advanced by the time since it was asked (0 stays 0: caught up)."""
        return self.age_ms + int((now - self.asked_at) * 1000) if self.age_ms else 0


class RemoteLags:
    """See the module docstring. ``local()`` names the partitions hosted here (their lag
    comes from the local logs), ``placement()`` each partition's leader id (topic ->
    partition -> broker id, -1 for none), ``address_of(broker id)`` its ``host:port``
    (None when unknown) and ``stub(address)`` a Broker stub to it."""

    def __init__(
        self,
        committed: CommittedFn,
        local: Callable[[], Iterable[tuple[str, int]]],
        placement: Callable[[], Mapping[str, Mapping[int, int]]],
        address_of: Callable[[int], str | None],
        stub: Callable[[str], broker_pb2_grpc.BrokerStub],
        interval_s: float,
    ) -> None:
        self._committed = committed
        self._local = local
        self._placement = placement
        self._address_of = address_of
        self._stub = stub
        self._interval_s = interval_s
        self.snapshot: dict[LagKey, RemoteLag] = {}

    async def run_forever(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # a failed round keeps the last answers; the next retries
                log.warning("group lag from other leaders failed", exc_info=True)
            await asyncio.sleep(self._interval_s)

    async def refresh(self) -> None:
        """Ask every leader of a coordinated group's partition not hosted here."""
        asks = self._asks()
        rounds = await asyncio.gather(*(self._ask(a, keys) for a, keys in asks.items()))
        self.snapshot = {key: lag for answers in rounds for key, lag in answers.items()}

    def _asks(self) -> dict[str, list[tuple[LagKey, int]]]:
        local, placement = set(self._local()), self._placement()
        asks: dict[str, list[tuple[LagKey, int]]] = defaultdict(list)
        for group, offsets in self._committed().items():
            for (topic, partition), offset in offsets.items():
                if (topic, partition) in local:
                    continue
                leader = placement.get(topic, {}).get(partition, -1)
                address = self._address_of(leader) if leader >= 0 else None
                if address is not None:
                    asks[address].append(((group, topic, partition), offset))
        return asks

    async def _ask(self, address: str, keys: list[tuple[LagKey, int]]) -> dict[LagKey, RemoteLag]:
        request = broker_pb2.ListOffsetsRequest(
            partitions=[
                broker_pb2.ListOffsetsPartition(
                    topic=topic, partition=partition, timestamp=-1, record_at=offset
                )
                for (_, topic, partition), offset in keys
            ]
        )
        try:
            response = await self._stub(address).ListOffsets(request, timeout=_TIMEOUT_S)
        except grpc.RpcError as exc:
            log.info("group lag: leader %s did not answer: %s", address, exc.code())
            return {}
        now = time.monotonic()
        answers: dict[LagKey, RemoteLag] = {}
        for (key, offset), result in zip(keys, response.results, strict=True):
            if result.error == ErrorCode.NONE:
                answers[key] = RemoteLag(max(0, result.offset - offset), result.record_age_ms, now)
        return answers
