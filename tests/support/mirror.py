"""Mirror workers and two-region setups for tests: real processes, no control plane.

    east, west = Region.start(tmp_path / "east"), Region.start(tmp_path / "west")
    east.create_topic("acme.orders", 3); west.create_topic("acme.orders", 3)
    worker = WorkerProcess(tmp_path / "w", link_config(east, west, {"acme.orders": 3}))
    worker.start()                 # python -m mirror, waits for its ready file
    worker.status()                # GET /status
    worker.wait_caught_up(total)   # until every source record is copied or skipped
    worker.kill(); worker.stop_signal(); worker.terminate()
    read_all(west.bootstrap, "acme.orders", 3)   # every record, per partition

A region is one or more broker processes (``tests.support.brokers``) with their own
topics: auth off. ``stop_all`` tears down whatever is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataplane.client import Admin, Consumer, ConsumerRecord, TopicPartition
from tests.support.brokers import BrokerProcess, start_cluster, stop_all

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0


@dataclass
class Region:
    name: str
    brokers: list[BrokerProcess]
    admin_token: str | None = None  # with authentication on: an internal token

    @classmethod
    def start(
        cls,
        directory: Path,
        brokers: int = 1,
        *,
        extra_args: Sequence[str] = (),
        admin_token: str | None = None,
    ) -> Region:
        return cls(directory.name, start_cluster(directory, brokers, extra_args=extra_args),
                   admin_token)  # fmt: skip

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers if b.running) or self.brokers[0].address

    def create_topic(self, name: str, partitions: int) -> None:
        with Admin(self.brokers[0].address, credentials=self.admin_token) as admin:
            admin.create_topic(name, partitions)

    def stop(self) -> None:
        stop_all(self.brokers)


def link_config(
    source: Region,
    target: Region,
    topics: Mapping[str, int],
    *,
    generation: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    """A worker configuration copying ``topics`` (name -> partitions) as they are named."""
    return {
        "link": f"acme/{source.name}-to-{target.name}",
        "link_id": 7,
        "generation": generation,
        "from_region": source.name,
        "to_region": target.name,
        "source": {"bootstrap": [b.address for b in source.brokers], "tls_ca_file": None},
        "target": {"bootstrap": [b.address for b in target.brokers], "tls_ca_file": None},
        "credentials": None,
        "topics": [
            {"source": t, "target": t, "partitions": list(range(n))} for t, n in topics.items()
        ],
        "start": {"position": "earliest"},
        "checkpoints": {},
        "checkpoint_interval_ms": 200,
        "batch": {"max_records": 5000, "max_bytes": 4 * 1024 * 1024, "linger_ms": 5},
        **extra,
    }


@dataclass
class WorkerProcess:
    directory: Path
    config: dict[str, Any]
    process: subprocess.Popen[bytes] | None = None
    status_port: int = 0
    starts: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)
    pass_fds: tuple[int, ...] = ()  # a lifeline's read end (dataplane.lifeline)

    @property
    def config_file(self) -> Path:
        return self.directory / "mirror.json"

    @property
    def log_file(self) -> Path:
        return self.directory / "mirror.log"

    def write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_file.unlink(missing_ok=True)
        fd = os.open(self.config_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump(self.config, file)

    def start(self) -> WorkerProcess:
        """Start the worker and wait for its ready file; the previous process must be
        dead (the provisioner's fencing rule)."""
        assert self.process is None or self.process.poll() is not None, "still running"
        self.write_config()
        ready = self.directory / "ready.json"
        ready.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.extra_env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "mirror", "--config", str(self.config_file),
                   "--ready-file", str(ready)]  # fmt: skip
        with self.log_file.open("ab") as log:
            log.write(f"--- start {self.starts}: {' '.join(command)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                pass_fds=self.pass_fds,
            )  # fmt: skip
        self.starts += 1
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready.exists():
                document = json.loads(ready.read_text())
                if document["pid"] == self.process.pid:
                    self.status_port = document["status_port"]
                    return self
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited: {self.log_text()[-5000:]}")
            time.sleep(0.05)
        raise AssertionError(f"the worker was not ready: {self.log_text()[-5000:]}")

    def get(self, path: str) -> bytes:
        url = f"http://127.0.0.1:{self.status_port}{path}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return bytes(answer.read())

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.get("/status")))

    def copied(self) -> int:
        return sum(p["copied_records"] for p in self.status()["partitions"])

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 60
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status()
            if predicate(status):
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"not reached within {timeout_s} s: {status}\n"
                                     f"{self.log_text()[-5000:]}")  # fmt: skip
            time.sleep(0.1)

    def wait_caught_up(
        self, source_ends: Mapping[int, int] | None = None, timeout_s: float = 90
    ) -> dict[str, Any]:
        """Until every partition's next source offset reached the source's end (or the
        given ends, by partition) with nothing in flight."""

        def caught_up(status: dict[str, Any]) -> bool:
            for p in status["partitions"]:
                end = p["source_end_offset"] if source_ends is None else source_ends[p["partition"]]
                if p["state"] != "copying" or p["next_source_offset"] < end or end < 0:
                    return False
            return True

        return self.wait_for(caught_up, timeout_s)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait(30)

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def terminate(self, timeout_s: float = 30) -> int:
        assert self.process is not None
        self.process.terminate()
        return self.process.wait(timeout_s)

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


def read_all(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 60, token: str | None = None
) -> dict[int, list[ConsumerRecord]]:
    """Every record of ``topic`` up to the high watermarks as they are now."""
    with Admin(bootstrap, credentials=token) as admin:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {
            tp.partition: off
            for tp, (off, _) in admin.list_offsets(dict.fromkeys(tps, "latest")).items()
        }
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                        max_poll_records=10_000, credentials=token)  # fmt: skip
    out: dict[int, list[ConsumerRecord]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign(tps)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp.partition] for tp in tps):
            for record in consumer.poll(200):
                if record.offset < ends[record.partition]:
                    out[record.partition].append(record)
            assert time.monotonic() < deadline, "the records were not read in time"
    finally:
        consumer.close()
    return out


def origin_of(record: ConsumerRecord) -> tuple[str | None, int | None]:
    headers = dict(record.headers)
    region = headers.get("x-origin-region")
    offset = headers.get("x-origin-offset")
    return (
        None if region is None else region.decode(),
        None if offset is None else int(offset),
    )
