"""Helpers of the transaction tests: reading a topic whole at an isolation level, the
coordinator's view of a transactional id, and worker processes to kill."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

from dataplane._gen.meridian.v1 import txn_pb2, txn_pb2_grpc
from dataplane.client import Admin, Consumer, ConsumerRecord, TopicPartition
from tests.support.brokers import REPO_ROOT, BrokerProcess

TIMEOUT_S = 60.0


def ends(
    bootstrap: str, tps: Sequence[TopicPartition], *, committed: bool
) -> dict[TopicPartition, int]:
    """Each partition's end for a reader of that isolation (the last stable offset for
    read_committed, the high watermark bounded by open half messages otherwise)."""
    with Admin(bootstrap) as admin:
        found = admin.list_offsets(dict.fromkeys(tps, "latest"), read_committed=committed)
    return {tp: offset for tp, (offset, _) in found.items()}


def stable(bootstrap: str, topic: str, partitions: int = 3) -> bool:
    """Whether no transaction holds any partition's last stable offset back (a commit's
    markers are written after ``commit_transaction`` returns)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    return ends(bootstrap, tps, committed=True) == ends(bootstrap, tps, committed=False)


def read_topic(
    bootstrap: str, topic: str, partitions: int, *, committed: bool, timeout_s: float = TIMEOUT_S
) -> list[ConsumerRecord]:
    """Every record a consumer of that isolation reads from the start to the partitions'
    ends as they are now."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    wanted = ends(bootstrap, tps, committed=committed)
    level = "read_committed" if committed else "read_uncommitted"
    consumer = Consumer(bootstrap, isolation_level=level, auto_offset_reset="earliest")
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        got: list[ConsumerRecord] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end for tp, end in wanted.items()):
            assert time.monotonic() < deadline, f"not read to {wanted} within {timeout_s} s"
            got += consumer.poll(timeout_ms=200)
        return got
    finally:
        consumer.close()


def values(records: Sequence[ConsumerRecord]) -> list[bytes]:
    return sorted(r.value or b"" for r in records)


def coordinator_of(bootstrap: str, transactional_id: str) -> tuple[int, str]:
    """(broker id, address) of the coordinator of ``transactional_id``."""
    with grpc.insecure_channel(bootstrap) as channel:
        stub = txn_pb2_grpc.TransactionsStub(channel)
        request = txn_pb2.FindTxnCoordinatorRequest(transactional_id=transactional_id)
        found = stub.FindCoordinator(request, timeout=10).coordinator
    return found.id, f"{found.host}:{found.port}"


def describe(address: str, transactional_id: str) -> txn_pb2.TransactionDescription:
    with grpc.insecure_channel(address) as channel:
        stub = txn_pb2_grpc.TransactionsStub(channel)
        request = txn_pb2.DescribeTransactionsRequest(transactional_ids=[transactional_id])
        (found,) = stub.DescribeTransactions(request, timeout=10).transactions
    return found


def leader_of(brokers: Sequence[BrokerProcess], topic: str, partition: int) -> BrokerProcess:
    """The broker leading ``topic``-``partition``, as the running brokers' metadata says."""
    with Admin([b.address for b in brokers if b.running]) as admin:
        admin.metadata.refresh([topic])
        leader = admin.metadata.leader_for(topic, partition)
    return next(b for b in brokers if b.address == leader.address)


class Worker:
    """``python -m tests.dataplane.broker.txn.worker MODE ARGS...`` as a process that
    prints ``ready`` once it has done what it must before it is killed."""

    def __init__(self, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self._log = log_path.open("w")
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-m", "tests.dataplane.broker.txn.worker", *args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
            cwd=REPO_ROOT,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)  # the worker exited

    def wait_for(self, line: str, timeout_s: float = TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                got = self._lines.get(timeout=remaining)
            except queue.Empty:
                break
            if got == line:
                return
            if got is None:
                break
        if self.process.poll() is None:  # its threads' stacks into its log (worker.py)
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(1)
        raise AssertionError(
            f"the worker never said {line!r}; its log:\n{self.log_path.read_text()}"
        )

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)
        self._log.close()

    def wait(self, timeout_s: float = TIMEOUT_S) -> int:
        code = self.process.wait(timeout_s)
        self._log.close()
        return code
