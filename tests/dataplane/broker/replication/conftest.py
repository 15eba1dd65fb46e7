"""Three real broker processes and a test-side controller (``tests.support.replication``).

``replicas``: brokers 1-3 started with a short ``replica_lag_time_max_ms`` (so ISR
shrinks happen within a test), and a ``TestController`` pushing every 100 ms. Both are
stopped at teardown whatever the test did; a failed test prints the brokers' logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess, start_cluster, stop_all
from tests.support.replication import TestController, resume

LAG_MS = 1500


@dataclass
class Replicas:
    brokers: dict[int, BrokerProcess]
    controller: TestController

    def __getitem__(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]


@pytest.fixture
def replicas(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Replicas]:
    brokers = start_cluster(tmp_path, 3, extra_args=["--replica-lag-time-max-ms", str(LAG_MS)])
    controller = TestController(brokers)
    try:
        yield Replicas({b.broker_id: b for b in brokers}, controller.start())
    finally:
        controller.stop()
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            for broker in brokers:
                print(f"===== log of {broker!r} =====\n{broker.log_text()[-15000:]}")
        for broker in brokers:
            if broker.running:
                resume(broker)  # a paused broker must be able to die
        stop_all(brokers)
