"""Databus on the whole platform: the demo (``tests/support/demo.py``) runs a Databus agent
as its service account, following the configuration ``demo-app`` on the control plane.
The test changes that configuration through the REST API while writers go through the
agent, and proves the change took effect live (same process), every acknowledged write
arrived once and in order, the agent reports itself, and the agent keeps working while
the control plane is stopped."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dataplane.client import Consumer, TopicPartition
from dataplane.client.auth import ClientCredentials
from tests.support.demo import Demo, processes_of, running_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    data_dir: Path = tmp_path_factory.mktemp("databus") / "demo"
    env = {"MERIDIAN_DATABUS_HEARTBEAT_S": "1"}
    with running_demo(data_dir, records=10, env=env, regions="east") as running:
        yield running


def wait_until(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Agent:
    def __init__(self, demo: Demo) -> None:
        self.address = demo.printed(r"==> Databus agent at http://(\S+)")
        self.token = (demo.data_dir / "databus" / "ingest-token").read_text().strip()
        self.data_dir = demo.data_dir

    def health(self) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(f"http://{self.address}/healthz", timeout=5) as answer:
                return dict(json.loads(answer.read()))
        except urllib.error.HTTPError as err:
            return dict(json.loads(err.read()))

    def write(self, stream: str, records: list[dict[str, Any]]) -> int:
        request = urllib.request.Request(
            f"http://{self.address}/v1/streams/{stream}/records",
            data=json.dumps({"records": records}).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    def pid(self) -> int:
        return _pid_of(self.data_dir, b"--config=demo-app")


def _pid_of(data_dir: Path, marker: bytes) -> int:
    for line in processes_of(data_dir):
        pid = int(line.split(":")[0])
        if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    raise AssertionError(f"no process with {marker!r}")


def make_topic(demo: Demo, name: str) -> str:
    status, body = demo.call(
        "POST", "/topics", {"name": name, "partitions": 3, "replication_factor": 3}
    )
    assert status == 201, body
    full = f"demo.{name}"
    wait_until(lambda: demo.call("GET", f"/topics/{full}")[1]["status"] == "ready", 60, full)
    return full


def set_streams(demo: Demo, streams: dict[str, Any]) -> tuple[int, Any]:
    status, body = demo.call(
        "PATCH", "/databus-configs/demo-app", {"document": {"streams": streams}}
    )
    return int(status), body


def read_markers(demo: Demo, topic: str, run: str) -> list[int]:
    """The ``n`` of every record of this run in ``topic``, in log order per partition
    (the writer's key puts them all in one partition)."""
    credentials = ClientCredentials(demo.token_url, demo.client_id, demo.client_secret)
    found: list[int] = []
    with Consumer(
        demo.bootstrap, auto_offset_reset="earliest", credentials=credentials
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        idle_until = time.monotonic() + 5
        while time.monotonic() < idle_until:
            batch = consumer.poll(timeout_ms=500)
            for record in batch:
                value = json.loads(record.value)
                if value.get("run") == run:
                    found.append(value["n"])
            if batch:
                idle_until = time.monotonic() + 3
    return found


def test_live_configuration_changes_and_a_stopped_control_plane(demo: Demo) -> None:
    agent = Agent(demo)
    base = demo.call("GET", "/databus-configs/demo-app")[1]
    streams = dict(base["document"]["streams"])
    first, second = make_topic(demo, "dbus-first"), make_topic(demo, "dbus-second")
    pid = agent.pid()

    status, body = set_streams(demo, {**streams, "probe": {"topic": first, "linger_ms": 5}})
    assert status == 200, body
    wait_until(lambda: agent.health()["version"] == body["version"], 40, "the agent to apply it")

    run = f"run-{time.time_ns()}"
    acked: list[int] = []
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            batch = [{"key": "one-key", "value": {"run": run, "n": n + i}} for i in range(5)]
            if agent.write("probe", batch) == 200:
                acked.extend(range(n, n + 5))
            n += 5
            time.sleep(0.01)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(1.5)
        status, body = set_streams(
            demo, {**streams, "probe": {"topic": second, "linger_ms": 50, "compression": "zstd"}}
        )
        assert status == 200, body
        wait_until(lambda: agent.health()["version"] == body["version"], 40, "the second change")
        time.sleep(1.5)
    finally:
        stop.set()
        thread.join()
    assert agent.pid() == pid, "the agent restarted"

    # A document the schema refuses is never stored, so never reaches the agent.
    status, refused = set_streams(demo, {"probe": {"topic": second, "linger_ms": -5}})
    assert status == 400
    assert "streams.probe.linger_ms" in json.dumps(refused)

    wait_until(lambda: agent.health()["streams"]["probe"]["spool_records"] == 0, 60, "drained")
    before, after = read_markers(demo, first, run), read_markers(demo, second, run)
    got = before + after
    assert before, "nothing went to the first topic"
    assert after, "nothing went to the second topic"
    assert len(got) == len(set(got)), "a record arrived twice"
    assert got == sorted(got), "records out of order across the change"
    assert set(acked) <= set(got), "acknowledged records lost"

    # The agent reports itself: version in force, up to date, live.
    agents = demo.call("GET", "/databus-agents?config=demo-app")[1]["results"]
    assert len(agents) == 1
    wait_until(
        lambda: (
            demo.call("GET", "/databus-agents?config=demo-app")[1]["results"][0]["version"]
            == body["version"]
        ),
        20,
        "a heartbeat with the new version",
    )
    row = demo.call("GET", "/databus-agents?config=demo-app")[1]["results"][0]
    assert row["up_to_date"]
    assert row["live"]
    assert row["stats"]["probe"]["records_in"] >= len(acked)

    # The control plane stops answering: the agent keeps its configuration and its work.
    api_pid = _pid_of(demo.data_dir, b"waitress")
    os.kill(api_pid, signal.SIGSTOP)
    try:
        outage = f"outage-{time.time_ns()}"
        statuses = [
            agent.write("probe", [{"key": "one-key", "value": {"run": outage, "n": n}}])
            for n in range(20)
        ]
        assert statuses == [200] * 20
        assert agent.health()["status"] == "ok"
        wait_until(lambda: agent.health()["streams"]["probe"]["spool_records"] == 0, 30, "drained")
    finally:
        os.kill(api_pid, signal.SIGCONT)
    assert read_markers(demo, second, outage) == list(range(20))
    set_streams(demo, streams)
