"""Fixtures of the Spark tests: one session per pytest process, and one tiered cluster.

``spark``: the local SparkSession (``spark.session.local_session``), warmed (a first job
and a first read of the ``meridian`` source start the Python workers); never stopped or
restarted by a test.

``tiered``: one broker with authentication and a folder store, shared by the tests of
the session, holding ``acme.events`` (2 partitions: records of every codec, headers,
null keys and values, a control batch in partition 0, most records only in the store,
an unsealed tail) and its lane topic ``acme.events~ppe``; tests that write make topics
of their own on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark.session import local_session
from tests.spark.support import (
    TieredCluster,
    append_control_batch,
    create_tiered,
    wait_uploaded,
    write_events,
)
from tests.support.brokers import tiered_process
from tests.support.issuer import TestIssuer

EVENTS = "acme.events"
LANE_TOPIC = "acme.events~ppe"
EVENTS_PER_PARTITION = 240
LANE_EVENTS = 80
CONTROL_OFFSET = EVENTS_PER_PARTITION // 2  # partition 0's transaction marker


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    # py4j logs its connections closing at exit, after pytest closed the captured streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = local_session("meridian-tests")
    session.range(1).count()
    empty = tmp_path_factory.mktemp("empty-store")
    session.read.format("meridian").option("topicPattern", ".*").option(
        "store", str(empty)
    ).load().count()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer() as running:
        yield running


@pytest.fixture(scope="session")
def tiered(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[TieredCluster]:
    root: Path = tmp_path_factory.mktemp("tiered")
    store = root / "objects"
    with tiered_process(
        root / "broker-1", ["--remote-store-uri", str(store)], extra_args=issuer.broker_args()
    ) as broker:
        cluster = TieredCluster(broker, issuer, str(store), {})
        with cluster.internal() as c:
            create_tiered(c, EVENTS, 2, "101")
            create_tiered(c, LANE_TOPIC, 1, "102")
        with cluster.internal() as c:
            write_events(c, EVENTS, 0, 0, EVENTS_PER_PARTITION // 2)
        assert append_control_batch(broker, EVENTS, 0) == CONTROL_OFFSET
        with cluster.internal() as c:
            write_events(c, EVENTS, 0, EVENTS_PER_PARTITION // 2, EVENTS_PER_PARTITION // 2)
            write_events(c, EVENTS, 1, 1000, EVENTS_PER_PARTITION)
            write_events(c, LANE_TOPIC, 0, 5000, LANE_EVENTS)
            wait_uploaded(c, EVENTS, min_segments=3)
            wait_uploaded(c, LANE_TOPIC, min_segments=1)
        yield cluster
