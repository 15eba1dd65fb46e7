"""The group lag metrics on a three-broker cluster: the broker coordinating a group
reports every partition of it, the ones other brokers lead from their answers."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane.client import Admin, Producer, TopicPartition
from tests.support.brokers import BrokerProcess, start_cluster, stop_all, wait_for_cluster

TOPIC, GROUP = "acme.spread-lag", "acme.spread-group"


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    config = tmp_path / "broker.toml"
    config.write_text("group_lag_interval_ms = 100\n")
    started = start_cluster(tmp_path, 3, extra_args=["--config", str(config)])
    try:
        wait_for_cluster(started)
        yield started
    finally:
        stop_all(started)


def _lags(broker: BrokerProcess, metric: str) -> dict[int, float]:
    """partition -> value of ``metric`` for the group, as ``broker`` reports it."""
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as response:
        text = response.read().decode()
    pattern = rf'^{metric}{{group="{GROUP}",partition="(\d+)",topic="{TOPIC}"}} (\S+)$'
    return {int(p): float(v) for p, v in re.findall(pattern, text, re.MULTILINE)}


def test_the_coordinator_reports_partitions_led_elsewhere(brokers: list[BrokerProcess]) -> None:
    with Admin(brokers[0].address) as admin:
        placement = admin.create_topic(TOPIC, 3)
        assert set(placement.values()) == {1, 2, 3}
        with Producer(brokers[0].address) as producer:
            for i in range(30):
                producer.send(TOPIC, b"%d" % i, partition=i % 3)
        tps = [TopicPartition(TOPIC, p) for p in range(3)]
        admin.alter_group_offsets(GROUP, {tps[0]: 10, tps[1]: 4, tps[2]: 0})

    def reported() -> tuple[dict[int, float], dict[int, float]] | None:
        for broker in brokers:
            records = _lags(broker, "meridian_group_lag_records")
            if len(records) == 3:
                return records, _lags(broker, "meridian_group_lag_seconds")
        return None

    deadline = time.monotonic() + 20
    while (found := reported()) is None:
        assert time.monotonic() < deadline, "no broker reported every partition of the group"
        time.sleep(0.1)
    records, seconds = found
    assert records == {0: 0, 1: 6, 2: 10}
    assert seconds[0] == 0
    assert seconds[2] >= seconds[1] > 0
