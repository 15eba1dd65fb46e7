"""A tiny test-side controller for replication tests: it creates replicated topics on
real broker processes and pushes ``Admin.UpdateMetadata`` the way the region controller
does (the controller epoch grows at every change; leaders, epochs, replicas, ISR and
``isr_version`` per partition; ``min_insync_replicas`` per topic).

    controller = TestController(brokers)                # {id: BrokerProcess} or a list
    controller.create_topic("acme.t", replicas=[1, 2, 3], partitions=2, min_isr=2)
    controller.start()                                  # push every 100 ms in a thread
    controller.elect("acme.t", 0, leader=2, isr=[2, 3]) # a new leader epoch, pushed
    controller.stop()

Every push sends the whole state to every broker in parallel (a stopped or paused one is
skipped after ``push_timeout_s``, its deadline) and reads the ISR proposals of the heartbeats: with
``auto_commit`` (the default) a proposal based on the current ``isr_version`` by the
current leader is committed at once (the ISR changes, ``isr_version`` grows) and pushed;
without it, proposals are only kept in ``proposals`` for the test to commit
(``commit``). Thread-safe.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc, common_pb2, delay_pb2
from tests.support.brokers import BrokerProcess

PUSH_TIMEOUT_S = 1.0


@dataclass
class PartitionPlan:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    isr_version: int = 1


@dataclass
class TopicPlan:
    min_isr: int
    partitions: dict[int, PartitionPlan] = field(default_factory=dict)


class TestController:
    __test__ = False  # not a test class

    def __init__(
        self,
        brokers: dict[int, BrokerProcess] | Sequence[BrokerProcess],
        *,
        cluster_id: str = "meridian",
        interval_s: float = 0.1,
        auto_commit: bool = True,
        push_timeout_s: float = PUSH_TIMEOUT_S,
    ) -> None:
        if not isinstance(brokers, dict):
            brokers = {b.broker_id: b for b in brokers}
        self.brokers = brokers
        self.cluster_id = cluster_id
        self.interval_s = interval_s
        self.auto_commit = auto_commit
        self.push_timeout_s = push_timeout_s
        self.epoch = 0
        self.topics: dict[str, TopicPlan] = {}
        self.proposals: dict[tuple[str, int], admin_pb2.IsrProposal] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._channels: dict[int, tuple[str, grpc.Channel]] = {}
        self.delay: delay_pb2.DelayPush | None = None  # retry policies to push, if any

    # -- topics and leadership ----------------------------------------------------------
    def create_topic(
        self,
        topic: str,
        replicas: list[int],
        *,
        partitions: int = 1,
        min_isr: int = 1,
        leader_epoch: int = 1,
        **config: Any,
    ) -> None:
        """Create the partitions on every replica broker, led by ``replicas[0]``, and push."""
        specs = [
            admin_pb2.PartitionSpec(
                topic=topic, partition=p, config=common_pb2.PartitionConfig(**config)
            )
            for p in range(partitions)
        ]
        for broker_id in replicas:
            response = self._admin(broker_id).CreatePartitions(
                admin_pb2.CreatePartitionsRequest(partitions=specs), timeout=15
            )
            assert all(not r.error for r in response.results), response
        with self._lock:
            self.topics[topic] = TopicPlan(
                min_isr,
                {
                    p: PartitionPlan(replicas[0], leader_epoch, list(replicas), list(replicas))
                    for p in range(partitions)
                },
            )
        self.push()

    def plan(self, topic: str, partition: int = 0) -> PartitionPlan:
        with self._lock:
            found = self.topics[topic].partitions[partition]
            return PartitionPlan(
                found.leader,
                found.leader_epoch,
                list(found.replicas),
                list(found.isr),
                found.isr_version,
            )

    def elect(
        self,
        topic: str,
        partition: int,
        leader: int,
        isr: Iterable[int] | None = None,
        *,
        push: bool = True,
    ) -> None:
        """Make ``leader`` (-1: none) lead at the next leader epoch; optionally set the
        ISR (a new ``isr_version``); push (``push`` false: the caller pushes, so that
        several elections reach the brokers in one push)."""
        with self._lock:
            found = self.topics[topic].partitions[partition]
            found.leader = leader
            found.leader_epoch += 1
            if isr is not None:
                found.isr = sorted(isr)
                found.isr_version += 1
            self.proposals.pop((topic, partition), None)
        if push:
            self.push()

    def set_isr(self, topic: str, partition: int, isr: Iterable[int], *, push: bool = True) -> None:
        with self._lock:
            found = self.topics[topic].partitions[partition]
            found.isr = sorted(isr)
            found.isr_version += 1
            self.proposals.pop((topic, partition), None)
        if push:
            self.push()

    def commit(self, topic: str, partition: int = 0) -> list[int]:
        """Commit the pending proposal of a partition (it must exist); returns the ISR."""
        with self._lock:
            proposal = self.proposals[(topic, partition)]
            self._commit(proposal)
            isr = list(self.topics[topic].partitions[partition].isr)
        self.push()
        return isr

    def _commit(self, proposal: admin_pb2.IsrProposal) -> bool:
        plan = self.topics.get(proposal.topic)
        found = plan.partitions.get(proposal.partition) if plan else None
        if found is None or proposal.leader_epoch != found.leader_epoch:
            return False
        if proposal.isr_version != found.isr_version:
            return False
        found.isr = sorted(proposal.isr)
        found.isr_version += 1
        self.proposals.pop((proposal.topic, proposal.partition), None)
        return True

    # -- pushing ------------------------------------------------------------------------
    def push(self, *, changed: bool = True) -> dict[int, admin_pb2.UpdateMetadataResponse]:
        """Push the state to every reachable broker; returns their heartbeats."""
        with self._lock:
            if changed:
                self.epoch += 1
            request = self._request()
        calls = {}
        for broker_id in self.brokers:
            if not self.brokers[broker_id].running:
                continue
            calls[broker_id] = self._admin(broker_id).UpdateMetadata.future(
                request, timeout=self.push_timeout_s
            )
        answers = {}
        for broker_id, call in calls.items():
            try:
                answers[broker_id] = call.result()
            except grpc.RpcError:
                continue
        committed = False
        with self._lock:
            for answer in answers.values():
                for proposal in answer.isr_proposals:
                    self.proposals[(proposal.topic, proposal.partition)] = proposal
                    if self.auto_commit:
                        committed = self._commit(proposal) or committed
        if committed:
            self.push()
        return answers

    def _request(self) -> admin_pb2.UpdateMetadataRequest:
        request = self._topics_request()
        if self.delay is not None:
            request.delay.CopyFrom(self.delay)
        return request

    def _topics_request(self) -> admin_pb2.UpdateMetadataRequest:
        return admin_pb2.UpdateMetadataRequest(
            controller_id="test-controller",
            controller_epoch=self.epoch,
            cluster_id=self.cluster_id,
            brokers=[
                common_pb2.BrokerInfo(
                    id=i, host="127.0.0.1", port=b.port, kafka_port=b.kafka_port or 0
                )
                for i, b in sorted(self.brokers.items())
            ],
            topics=[
                admin_pb2.MetadataTopic(
                    name=name,
                    min_insync_replicas=plan.min_isr,
                    partitions=[
                        admin_pb2.MetadataPartition(
                            partition=p,
                            leader_id=part.leader,
                            leader_epoch=part.leader_epoch,
                            replicas=part.replicas,
                            isr=part.isr,
                            isr_version=part.isr_version,
                        )
                        for p, part in sorted(plan.partitions.items())
                    ],
                )
                for name, plan in sorted(self.topics.items())
            ],
        )

    def _admin(self, broker_id: int) -> admin_pb2_grpc.AdminStub:
        address = self.brokers[broker_id].address
        known = self._channels.get(broker_id)
        if known is None or known[0] != address:
            if known is not None:
                known[1].close()
            known = self._channels[broker_id] = (address, grpc.insecure_channel(address))
        return admin_pb2_grpc.AdminStub(known[1])

    # -- background pushes --------------------------------------------------------------
    def start(self) -> TestController:
        self._thread = threading.Thread(target=self._run, name="test-controller", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.push(changed=False)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for _, channel in self._channels.values():
            channel.close()

    def __enter__(self) -> TestController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- waiting ------------------------------------------------------------------------
    def wait_for_isr(
        self, topic: str, partition: int, isr: Iterable[int], timeout_s: float = 20
    ) -> None:
        wanted = sorted(isr)
        deadline = time.monotonic() + timeout_s
        while self.plan(topic, partition).isr != wanted:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"ISR of {topic}-{partition} is {self.plan(topic, partition).isr}, "
                    f"not {wanted}, after {timeout_s} s"
                )
            if self._thread is None:
                self.push(changed=False)
            time.sleep(0.05)

    def wait_for_proposal(
        self, topic: str, partition: int, isr: Iterable[int], timeout_s: float = 20
    ) -> admin_pb2.IsrProposal:
        wanted = sorted(isr)
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                found = self.proposals.get((topic, partition))
            if found is not None and sorted(found.isr) == wanted:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"no proposal of ISR {wanted} for {topic}-{partition}")
            if self._thread is None:
                self.push(changed=False)
            time.sleep(0.05)


def pause(broker: BrokerProcess) -> None:
    """SIGSTOP: the process stays alive but answers nothing."""
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGSTOP)


def resume(broker: BrokerProcess) -> None:
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGCONT)
