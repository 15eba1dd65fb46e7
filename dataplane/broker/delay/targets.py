"""Writing batches to partitions of this cluster wherever they are led: through this
broker's own produce handler when it leads the partition, else with ``Broker.Produce``
to the leader, on the broker's peer channel (its own credentials, the internal role).

``TargetWriter.produce`` sends one request per leader at once and answers one
``PartitionProduceResult`` per partition asked; nothing raises: a partition without a
known leader is ``LEADER_NOT_AVAILABLE``, a call that fails in transport the retriable
code ``error_from_rpc`` gives it (``BROKER_NOT_AVAILABLE``, ``REQUEST_TIMED_OUT``).
Callers retry retriable answers with the same bytes: batches with a producer id are then
deduplicated by the leader, wherever the leadership went meanwhile.

What is written is charged to its tenants' produce rate quotas and held while they are
in debt (``throttling.metered``) on the leader: a peer's interceptor does it for a
request sent there, and the writer itself for one its own broker leads, so records
delivered late all at once go out at the tenant's rate wherever their topic is led.
``produce(..., charge=False)`` skips the writer's own charge, for records a client's
request already paid for (a diverted request's timer records).

Thread safety: event-loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

import grpc

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.broker.quotas import QuotaManager
from dataplane.broker.throttling import metered
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

TopicPartitionKey = tuple[str, int]
LocalProduce = Callable[[broker_pb2.ProduceRequest], Awaitable[broker_pb2.ProduceResponse]]


class TargetWriter:
    """``leader_of(topic, partition)``: the leader's broker id (None: unknown);
    ``stub_for(broker id)``: a Broker stub to it (None: its address is unknown);
    ``local``: this broker's produce handler (its ``submit``); ``quotas``: this broker's
    rate quotas, charged for what ``local`` writes (None: no quotas)."""

    def __init__(
        self,
        broker_id: int,
        local: LocalProduce,
        leader_of: Callable[[str, int], int | None],
        stub_for: Callable[[int], broker_pb2_grpc.BrokerStub | None],
        *,
        timeout_ms: int = 10_000,
        quotas: QuotaManager | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._local = local
        self._quotas = quotas
        self._leader_of = leader_of
        self._stub_for = stub_for
        self._timeout_ms = timeout_ms

    async def produce(
        self, parts: Mapping[TopicPartitionKey, bytes], acks: int = -1, *, charge: bool = True
    ) -> dict[TopicPartitionKey, broker_pb2.PartitionProduceResult]:
        by_leader: dict[int, list[TopicPartitionKey]] = {}
        results: dict[TopicPartitionKey, broker_pb2.PartitionProduceResult] = {}
        for tp in parts:
            leader = self._leader_of(*tp)
            if leader is None or leader < 0:
                results[tp] = _failed(
                    tp, ErrorCode.LEADER_NOT_AVAILABLE, f"{tp[0]}-{tp[1]} has no known leader"
                )
            else:
                by_leader.setdefault(leader, []).append(tp)
        answers = await asyncio.gather(
            *(self._send(leader, tps, parts, acks, charge) for leader, tps in by_leader.items())
        )
        for answer in answers:
            results.update(answer)
        return results

    async def _send(
        self,
        leader: int,
        tps: list[TopicPartitionKey],
        parts: Mapping[TopicPartitionKey, bytes],
        acks: int,
        charge: bool = True,
    ) -> dict[TopicPartitionKey, broker_pb2.PartitionProduceResult]:
        request = broker_pb2.ProduceRequest(
            acks=acks,
            timeout_ms=self._timeout_ms,
            partitions=[
                broker_pb2.PartitionRecords(topic=t, partition=p, records=parts[(t, p)])
                for t, p in tps
            ],
        )
        try:
            if leader == self.broker_id and self._quotas is not None and charge:
                response, _ = await metered(self._quotas, request, self._local)
            elif leader == self.broker_id:
                response = await self._local(request)
            else:
                stub = self._stub_for(leader)
                if stub is None:
                    raise MeridianError(
                        ErrorCode.LEADER_NOT_AVAILABLE, f"broker {leader}'s address is unknown"
                    )
                response = await stub.Produce(request, timeout=self._timeout_ms / 1000 + 5)
        except grpc.aio.AioRpcError as exc:
            error = error_from_rpc(exc)
            return {tp: _failed(tp, error.code, error.message) for tp in tps}
        except MeridianError as exc:
            return {tp: _failed(tp, exc.code, exc.message) for tp in tps}
        answered = {(r.topic, r.partition): r for r in response.results}
        return {
            tp: answered.get(tp) or _failed(tp, ErrorCode.UNKNOWN_SERVER_ERROR, "no answer")
            for tp in tps
        }


def _failed(tp: TopicPartitionKey, code: int, message: str) -> broker_pb2.PartitionProduceResult:
    return broker_pb2.PartitionProduceResult(
        topic=tp[0],
        partition=tp[1],
        error=code,  # type: ignore[arg-type]
        error_message=message,
        base_offset=-1,
    )
