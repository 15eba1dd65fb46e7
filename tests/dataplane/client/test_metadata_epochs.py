"""``ClusterMetadata`` never goes back to an older leader epoch: a hedged refresh may be
answered first by a broker whose last push is behind."""

from __future__ import annotations

import pytest

from dataplane._gen.meridian.v1 import broker_pb2, common_pb2
from dataplane.client import metadata
from dataplane.client.connection import ConnectionPool
from dataplane.client.metadata import ClusterMetadata


def _answer(leader: int, epoch: int) -> broker_pb2.MetadataResponse:
    partition = broker_pb2.PartitionMetadata(partition=0, leader_id=leader, leader_epoch=epoch)
    topic = broker_pb2.TopicMetadata(name="acme.orders", partitions=[partition])
    brokers = [common_pb2.BrokerInfo(id=i, host="127.0.0.1", port=9000 + i) for i in (1, 2)]
    return broker_pb2.MetadataResponse(brokers=brokers, topics=[topic])


@pytest.fixture
def cache() -> ClusterMetadata:
    return ClusterMetadata(ConnectionPool(["127.0.0.1:1"]))


def test_an_answer_naming_an_older_epoch_keeps_the_newer_leader(cache: ClusterMetadata) -> None:
    cache._merge(_answer(leader=2, epoch=5), full=False)
    snapshot = cache._merge(_answer(leader=1, epoch=4), full=False)  # a lagging broker
    assert snapshot.leaders["acme.orders"] == {0: 2}
    assert snapshot.epochs["acme.orders"][0][0] == 5
    newer = cache._merge(_answer(leader=1, epoch=6), full=True)
    assert (newer.leaders["acme.orders"], newer.epochs["acme.orders"][0][0]) == ({0: 1}, 6)


def test_an_older_epoch_is_believed_once_the_newer_one_is_old(
    cache: ClusterMetadata, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without topic ids, a topic deleted and created again starts its epochs anew."""
    clock = [1000.0]
    monkeypatch.setattr(metadata.time, "monotonic", lambda: clock[0])
    cache._merge(_answer(leader=2, epoch=5), full=False)
    # Refreshed every 4 s, the stale answers keep coming: the newer epoch holds only
    # EPOCH_MEMORY_S from when it was first seen, however often the client refreshes.
    for _ in range(2):
        clock[0] += 4
        assert cache._merge(_answer(leader=1, epoch=0), full=False).leaders["acme.orders"] == {0: 2}
    clock[0] += 4
    snapshot = cache._merge(_answer(leader=1, epoch=0), full=False)
    assert snapshot.leaders["acme.orders"] == {0: 1}
