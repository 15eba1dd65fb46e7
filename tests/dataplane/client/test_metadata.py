"""``ClusterMetadata`` against real brokers: a hung broker does not hold a refresh."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client import metadata
from dataplane.client.connection import ConnectionPool
from dataplane.client.metadata import ClusterMetadata
from tests.support.brokers import BrokerProcess
from tests.support.replication import pause, resume

# Longer than the wait below: only asking another broker can answer in time.
ATTEMPT_S = 600.0
WAIT_S = 60.0


def test_a_refresh_asks_another_broker_while_the_first_one_hangs(
    cluster: list[BrokerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metadata, "ATTEMPT_TIMEOUT_S", ATTEMPT_S)
    hung, *live = cluster
    pool = ConnectionPool([hung.address] + [b.address for b in live])  # asked in this order
    cache = ClusterMetadata(pool, timeout_s=ATTEMPT_S)
    # Connected before it hangs, as a client's channel to a broker that then freezes is.
    pool.get(hung.address).broker.Metadata(broker_pb2.MetadataRequest(), timeout=10)
    pause(hung)
    try:
        with ThreadPoolExecutor(1) as pool_thread:
            snapshot = pool_thread.submit(cache.refresh).result(WAIT_S)
            assert sorted(snapshot.brokers) == [1, 2, 3]
    finally:
        resume(hung)
        pool.close()
