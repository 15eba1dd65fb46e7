"""A client stays quiet through failovers: nothing but its own results reach the user.

An SDK producer (idempotent, ``acks="all"``) and consumer run in their own process
(``failover_client``) while the leader of their topic is killed (SIGKILL) and restarted,
and the next leader is frozen (SIGSTOP) and resumed, with a test-side controller moving
the leadership each time. Errors belong in futures, callbacks and logging the
application configured: the client process's stderr must hold no asyncio noise (a task
exception never retrieved, a task destroyed while pending, an asynchronous generator
closed while running), no traceback, nothing at all -- through the faults, ``close()``
and interpreter exit. And every acknowledged record is stored and consumed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.brokers import REPO_ROOT, BrokerProcess, start_cluster, stop_all
from tests.support.replication import TestController, pause, resume

TOPIC = "acme.quiet"
PARTITIONS = 3
LAG_MS = 1500
CLIENT_EXIT_S = 120.0


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    started = start_cluster(tmp_path, 3, extra_args=["--replica-lag-time-max-ms", str(LAG_MS)])
    try:
        yield {b.broker_id: b for b in started}
    finally:
        for broker in started:
            if broker.running:
                resume(broker)  # a paused broker must be able to die
        stop_all(started)


def _start_client(bootstrap: str, out: Path, token: str | None) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "tests.dataplane.integration.failover_client"]
    args += [bootstrap, TOPIC, str(out)] + ([token] if token else [])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        args, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _stop_client(client: subprocess.Popen[bytes], out: Path) -> tuple[str, str]:
    """Tell the client to finish; its stdout and stderr once it exited."""
    (out / "stop").touch()
    try:
        stdout, stderr = client.communicate(timeout=CLIENT_EXIT_S)
    except subprocess.TimeoutExpired:
        client.kill()
        client.communicate()
        raise
    return stdout.decode(errors="replace"), stderr.decode(errors="replace")


def _acked(out: Path) -> int:
    path = out / "acked"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait_for_progress(out: Path, more: int = 200, timeout_s: float = 60) -> None:
    """Until ``more`` further records are acknowledged: the client is through a fault."""
    target = _acked(out) + more
    deadline = time.monotonic() + timeout_s
    while _acked(out) < target:
        assert time.monotonic() < deadline, f"no progress: {_acked(out)} acknowledged"
        time.sleep(0.1)


def _elect_all(controller: TestController, leader: int, isr: list[int]) -> None:
    for partition in range(PARTITIONS):
        controller.elect(TOPIC, partition, leader=leader, isr=isr)


def _faults(brokers: dict[int, BrokerProcess], controller: TestController, out: Path) -> None:
    _wait_for_progress(out)
    brokers[1].kill()  # the leader of every partition dies
    _elect_all(controller, 2, [2, 3])
    _wait_for_progress(out)
    brokers[1].restart()
    for partition in range(PARTITIONS):
        controller.wait_for_isr(TOPIC, partition, [1, 2, 3])
    _wait_for_progress(out)
    pause(brokers[2])  # the new leader hangs, its streams stay open
    try:
        _elect_all(controller, 3, [1, 3])
        _wait_for_progress(out)
    finally:
        resume(brokers[2])
    _wait_for_progress(out)


@pytest.mark.parametrize("token", [None, "static-token"], ids=["plain", "interceptors"])
def test_a_client_prints_nothing_while_brokers_fail_under_it(
    brokers: dict[int, BrokerProcess], tmp_path: Path, token: str | None
) -> None:
    with TestController(brokers) as controller:
        controller.create_topic(TOPIC, [1, 2, 3], partitions=PARTITIONS, min_isr=2)
        controller.start()
        out = tmp_path / "client"
        out.mkdir()
        bootstrap = ",".join(b.address for b in brokers.values())
        client = _start_client(bootstrap, out, token)
        try:
            _faults(brokers, controller, out)
        finally:
            stdout, text = _stop_client(client, out)
    assert client.returncode == 0, f"exit {client.returncode}\n{stdout}\n{text}"
    for noise in (
        "Task exception was never retrieved",
        "Task was destroyed but it is pending",
        "asynchronous generator is already running",
        "Traceback",
    ):
        assert noise not in text, text
    assert text == "", text
    assert not (out / "failed").read_text(), "every record is acknowledged"
    acked = {line.split()[0] for line in (out / "acked").read_text().splitlines()}
    consumed = set((out / "consumed").read_text().splitlines())
    assert acked <= consumed, f"{len(acked - consumed)} acknowledged records never consumed"
