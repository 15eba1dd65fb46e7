"""Asking a transaction's coordinator whether partitions are in a producer's open
transaction (KIP-890's verification), from a partition leader or a group coordinator.

The coordinator of a transactional id is the static owner of its ``__transaction_state``
partition (``owner_of``); this broker's own coordinator is asked directly, another
broker's through ``TxnMarkers.VerifyTxn`` (``remote``). A coordinator that cannot be
reached answers every partition with the retriable reason (``COORDINATOR_NOT_AVAILABLE``,
``NOT_COORDINATOR``, ``BROKER_NOT_AVAILABLE``...), so the producer retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import grpc

from dataplane._gen.meridian.v1 import common_pb2, txn_pb2
from dataplane.broker.errors import to_error
from dataplane.broker.groups.coordinator import OFFSETS_TOPIC
from dataplane.broker.txn.coordinator import TransactionCoordinator
from dataplane.broker.txn.state import TopicPartitionKey
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

RemoteVerify = Callable[[int, txn_pb2.VerifyTxnRequest], Awaitable[txn_pb2.VerifyTxnResponse]]
Answers = dict[TopicPartitionKey, MeridianError | None]


class TxnVerifier:
    def __init__(
        self,
        broker_id: int,
        coordinator: TransactionCoordinator,
        owner_of: Callable[[int], int | None],
        remote: RemoteVerify,
    ) -> None:
        self._broker_id = broker_id
        self._coordinator = coordinator
        self._owner_of = owner_of
        self._remote = remote

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartitionKey],
    ) -> Answers:
        """Per partition: None when it is in the open transaction, else why not."""
        wanted = list(partitions)
        owner = self._owner_of(self._coordinator.partition_for(transactional_id))
        try:
            if owner is None:
                raise MeridianError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"no broker coordinates transactional id {transactional_id!r}",
                )
            if owner == self._broker_id:
                return self._coordinator.verify(transactional_id, producer_id, epoch, wanted)
            return await self._ask(owner, transactional_id, producer_id, epoch, wanted)
        except asyncio.CancelledError:
            raise
        except grpc.RpcError as exc:
            return dict.fromkeys(wanted, error_from_rpc(exc))
        except Exception as exc:  # the coordinator's answer, for every partition
            return dict.fromkeys(wanted, to_error(exc))

    async def offsets(
        self, transactional_id: str, producer_id: int, epoch: int, offsets_partition: int
    ) -> MeridianError | None:
        """For the group coordinator: is its ``__consumer_offsets`` partition in it?"""
        tp = (OFFSETS_TOPIC, offsets_partition)
        return (await self.verify(transactional_id, producer_id, epoch, [tp]))[tp]

    async def _ask(
        self,
        owner: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartitionKey],
    ) -> Answers:
        request = txn_pb2.VerifyTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions],
        )
        response = await self._remote(owner, request)
        found: Answers = {
            (r.topic, r.partition): MeridianError(r.error, r.error_message) if r.error else None
            for r in response.results
        }
        missing = MeridianError(
            ErrorCode.UNKNOWN_SERVER_ERROR, "the coordinator left it unanswered"
        )
        return {tp: found.get(tp, missing) for tp in partitions}
