"""Three real broker processes (with Kafka listeners) and a test-side controller, shared
by the delayed-delivery tests of a module: the tenant ``acme``'s timer log
``__delay.acme`` (3 partitions, 3 replicas, min ISR 2, no retention), its topic
``acme.orders`` (3 partitions, 3 replicas) and the retry and dead-letter topics of the
group ``acme.billing``, whose retry policy the controller pushes (``max_attempts`` 3).

A test that kills brokers calls ``Delays.heal()`` at its end: every broker runs again,
every partition has a leader. A failed test prints the brokers' logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from dataplane._gen.meridian.v1 import delay_pb2
from tests.support.brokers import BrokerProcess, start_cluster, stop_all
from tests.support.replication import TestController

LAG_MS = 1000
TIMER = "__delay.acme"
ORDERS = "acme.orders"
GROUP = "acme.billing"
RETRY_TOPIC = f"{GROUP}.retry"
DEAD_LETTERS = f"{GROUP}.dlq"
POLICY = delay_pb2.RetryPolicy(
    group_id=GROUP,
    max_attempts=3,
    backoff_initial_ms=1000,
    backoff_multiplier=2.0,
    backoff_max_ms=60_000,
    retry_topic=RETRY_TOPIC,
    dead_letter_topic=DEAD_LETTERS,
)


@dataclass
class Delays:
    brokers: dict[int, BrokerProcess]
    controller: TestController

    @property
    def bootstrap(self) -> list[str]:
        return [b.address for b in self.brokers.values() if b.running]

    def leader(self, topic: str, partition: int) -> int:
        return self.controller.plan(topic, partition).leader

    def kill(self, broker_id: int) -> None:
        """SIGKILL a broker and elect new leaders for what it led, from the ISR."""
        self.brokers[broker_id].kill()
        controller = self.controller
        for topic, plan in list(controller.topics.items()):
            for partition, found in plan.partitions.items():
                isr = [b for b in found.isr if b != broker_id]
                if found.leader == broker_id:
                    controller.elect(topic, partition, leader=isr[0], isr=isr, push=False)
                elif broker_id in found.isr:
                    controller.set_isr(topic, partition, isr, push=False)
        controller.push()

    def restart_all(self) -> None:
        """SIGKILL every broker, then start them all again (the same leaders)."""
        for broker in self.brokers.values():
            broker.kill()
        self.heal()

    def heal(self) -> None:
        """Start every stopped broker again (at once), and push."""
        stopped = [b for b in self.brokers.values() if not b.running]
        for broker in stopped:
            broker.launch()
        for broker in stopped:
            broker.wait_ready()
        self.controller.push()


@pytest.fixture(scope="module")
def delays(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Delays]:
    brokers = start_cluster(
        tmp_path_factory.mktemp("delays"),
        3,
        extra_args=["--replica-lag-time-max-ms", str(LAG_MS)],
        kafka=True,
    )
    controller = TestController(brokers)
    controller.delay = delay_pb2.DelayPush(policies_listed=True, retry_policies=[POLICY])
    failed_before = request.session.testsfailed
    try:
        no_retention = {"retention_ms": -1, "retention_bytes": -1}
        controller.create_topic(TIMER, [1, 2, 3], partitions=3, min_isr=2, **no_retention)
        controller.create_topic(ORDERS, [2, 3, 1], partitions=3, min_isr=2)
        controller.create_topic(RETRY_TOPIC, [3, 1, 2], partitions=1, min_isr=2)
        controller.create_topic(DEAD_LETTERS, [1, 2, 3], partitions=1, min_isr=2)
        yield Delays({b.broker_id: b for b in brokers}, controller.start())
    finally:
        controller.stop()
        if request.session.testsfailed > failed_before:
            for broker in brokers:
                print(f"===== log of {broker!r} =====\n{broker.log_text()[-15000:]}")
        stop_all(brokers)
