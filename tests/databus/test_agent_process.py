"""The agent as a real process on real brokers: writers in other processes over HTTP and
gRPC, ``kill -9`` under load, brokers down for a while, and a live configuration change,
each ending with a read of the topics that proves every acknowledged write arrived once,
in order per key."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dataplane.client import Admin
from tests.databus.conftest import wait_until
from tests.dataplane.client.support import read_all
from tests.support.brokers import BrokerProcess, stop_all
from tests.support.databus import REPO_ROOT, AgentProcess

TOPIC = "acme.clicks"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "broker", broker_id=1).start()
    with Admin(process.address) as admin:
        admin.create_topic(TOPIC, 3, {"durability": "interval"})
        admin.create_topic("acme.other", 2, {"durability": "interval"})
    try:
        yield process
    finally:
        stop_all([process])


def write_config(path: Path, **stream: Any) -> None:
    path.write_text(json.dumps({"streams": {"clicks": {"topic": TOPIC, "linger_ms": 5, **stream}}}))


@pytest.fixture
def agent(tmp_path: Path, broker: BrokerProcess) -> Iterator[AgentProcess]:
    config = tmp_path / "databus.json"
    write_config(config)
    process = AgentProcess(tmp_path / "agent", broker.address, args=["--config-file", str(config)])
    process.config_path = config  # type: ignore[attr-defined]
    try:
        yield process.start()
    finally:
        process.stop()


class Writers:
    def __init__(self, tmp_path: Path, agent: AgentProcess, count: int, **extra: str) -> None:
        self.stop_file = tmp_path / "stop-writers"
        self.outs = [tmp_path / f"writer-{n}.out" for n in range(count)]
        self.processes = []
        for n, out in enumerate(self.outs):
            via = "grpc" if n % 2 else "http"
            target = agent.grpc_target if via == "grpc" else agent.http
            args = [f"--{k.replace('_', '-')}={v}" for k, v in extra.items()]
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.databus.writer", "--via", via, "--target", target,
                     "--token", agent.token, "--writer", str(n), "--out", str(out),
                     "--stop", str(self.stop_file), *args],
                    cwd=REPO_ROOT,
                )
            )  # fmt: skip

    def stop(self) -> None:
        self.stop_file.touch()
        for process in self.processes:
            assert process.wait(60) == 0

    def acked(self) -> int:
        return sum(len(acked) for acked, _ in self.outcomes().values())

    def wait_acked(self, more_than: int, timeout_s: float = 60) -> None:
        wait_until(lambda: self.acked() > more_than, timeout_s, f"{more_than} acknowledged")

    def outcomes(self) -> dict[int, tuple[set[int], set[int]]]:
        """writer -> (acknowledged seqs, unknown seqs)"""
        result = {}
        for n, out in enumerate(self.outs):
            acked, unknown = set(), set()
            text = out.read_text() if out.exists() else ""
            for line in text.splitlines()[: -1 if text and not text.endswith("\n") else None]:
                mark, seq = line.split()
                (acked if mark == "A" else unknown).add(int(seq))
            result[n] = (acked, unknown)
        return result


def delivered(
    broker: BrokerProcess, topic: str = TOPIC, partitions: int = 3
) -> dict[int, list[int]]:
    """writer -> the seqs found in ``topic``, in log order (one partition per key)."""
    found: dict[int, list[int]] = defaultdict(list)
    for records in read_all(broker.address, topic, partitions, timeout_s=60).values():
        for record in records:
            value = json.loads(record.value)
            assert record.key == f"w{value['w']}".encode()
            found[value["w"]].append(value["n"])
    return found


def wait_drained(agent: AgentProcess, timeout_s: float = 60) -> None:
    wait_until(
        lambda: all(s["spool_records"] == 0 for s in agent.health()["streams"].values()),
        timeout_s,
        "the spool to drain",
    )


def check_exactly_once(writers: Writers, found: dict[int, list[int]]) -> int:
    total = 0
    for n, (acked, unknown) in writers.outcomes().items():
        seqs = found.get(n, [])
        assert len(seqs) == len(set(seqs)), f"writer {n}: a record arrived twice"
        assert seqs == sorted(seqs), f"writer {n}: records out of order"
        missing = acked - set(seqs)
        assert not missing, f"writer {n}: {len(missing)} acknowledged records lost"
        assert set(seqs) <= acked | unknown, f"writer {n}: records nobody wrote"
        total += len(acked)
    return total


@pytest.mark.slow
def test_kill_9_under_load_loses_and_repeats_no_acknowledged_write(
    tmp_path: Path, broker: BrokerProcess, agent: AgentProcess
) -> None:
    writers = Writers(tmp_path, agent, 4)
    try:
        writers.wait_acked(0)
        for _ in range(4):
            writers.wait_acked(writers.acked() + 200)
            agent.kill()
            agent.start()
        writers.wait_acked(writers.acked() + 200)
    finally:
        writers.stop()
    wait_drained(agent)
    acked = check_exactly_once(writers, delivered(broker))
    assert acked > 1000
    assert agent.starts == 5
    agent.terminate()


def test_brokers_down_fill_the_spool_which_drains_when_they_return(
    tmp_path: Path, broker: BrokerProcess, agent: AgentProcess
) -> None:
    writers = Writers(tmp_path, agent, 2)
    try:
        writers.wait_acked(50)
        broker.kill()
        wait_until(
            lambda: agent.health()["streams"]["clicks"]["spool_records"] > 200,
            30,
            "a spool backlog",
        )
        broker.start()
        time.sleep(0.5)
    finally:
        writers.stop()
    wait_drained(agent)
    check_exactly_once(writers, delivered(broker))
    metrics = agent.metrics()
    assert 'meridian_databus_send_errors_total{stream="clicks"}' in metrics
    assert 'meridian_databus_send_errors_total{stream="clicks"} 0.0' not in metrics


def test_a_live_configuration_change_moves_the_stream_without_a_restart(
    tmp_path: Path, broker: BrokerProcess, agent: AgentProcess
) -> None:
    writers = Writers(tmp_path, agent, 2)
    pid = agent.process.pid  # type: ignore[union-attr]
    try:
        writers.wait_acked(100)
        write_config(agent.config_path, topic="acme.other", compression="zstd", linger_ms=50)  # type: ignore[attr-defined]
        wait_until(lambda: agent.health()["version"] == 2, 30, "the new configuration")
        writers.wait_acked(writers.acked() + 100)
    finally:
        writers.stop()
    assert agent.process.pid == pid  # type: ignore[union-attr]
    wait_drained(agent)
    before, after = delivered(broker, TOPIC, 3), delivered(broker, "acme.other", 2)
    assert sum(map(len, before.values())) > 0
    assert sum(map(len, after.values())) > 0
    both = {n: before.get(n, []) + after.get(n, []) for n in range(2)}
    check_exactly_once(writers, both)
    for n in range(2):  # every record of the old topic came before any of the new one
        if before.get(n) and after.get(n):
            assert max(before[n]) < min(after[n])
