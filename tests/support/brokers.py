"""Real broker processes for tests, on 127.0.0.1.

    broker = BrokerProcess(tmp_path / "b1", broker_id=1).start()
    broker.address            # "127.0.0.1:PORT", for grpc channels and SDK bootstrap
    broker.kill()             # SIGKILL: an unclean stop
    broker.restart()          # same data directory, same port
    broker.terminate()        # SIGTERM; asserts a clean exit (code 0)

    brokers = start_cluster(tmp_path, 3)   # ids 1..n, every one knows every other
    wait_for_cluster(brokers)              # until each one's Metadata lists them all

A broker runs ``python -m dataplane.broker`` with port 0 (or the port it had, on
restart) and a ready file; ``start`` returns once the ready file names its port. Its
stdout and stderr go to ``<dir>/broker.log``; ``log_text()`` returns them, and failures
of ``start`` include them. ``stop_all`` (used by the fixtures) kills whatever is left.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class BrokerProcess:
    """One broker process; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        broker_id: int = 1,
        peers: dict[int, str] | None = None,
        port: int = 0,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.directory = Path(directory)
        self.broker_id = broker_id
        self.peers = dict(peers or {})
        self.port = port
        self.metrics_port = 0
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen[bytes] | None = None
        self.directory.mkdir(parents=True, exist_ok=True)

    # -- paths ------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def ready_path(self) -> Path:
        return self.directory / "ready.json"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def command(self) -> list[str]:
        args = [
            sys.executable, "-m", "dataplane.broker",
            "--id", str(self.broker_id),
            "--listen", f"127.0.0.1:{self.port}",
            "--data-dir", str(self.data_dir),
            "--metrics-listen", "127.0.0.1:0",
            "--ready-file", str(self.ready_path),
        ]  # fmt: skip
        for peer_id, address in sorted(self.peers.items()):
            args += ["--peer", f"{peer_id}={address}"]
        return args + self.extra_args

    # -- lifecycle --------------------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> BrokerProcess:
        """Start the process and wait until it serves; raises with its log otherwise."""
        self.launch()
        self.wait_ready(timeout_s)
        return self

    def launch(self) -> None:
        """Start the process without waiting for it (then ``wait_ready``)."""
        assert not self.running, "already running"
        self.ready_path.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as log_file:
            log_file.write(f"--- start: {' '.join(self.command())}\n".encode())
            log_file.flush()
            self.process = subprocess.Popen(
                self.command(), stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env
            )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until the launched process serves (its ready file names its pid)."""
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready_path.exists():
                ready = json.loads(self.ready_path.read_text())
                if ready["pid"] == self.process.pid:
                    self.port, self.metrics_port = ready["port"], ready["metrics_port"]
                    return
            if self.process.poll() is not None:
                raise BrokerProcessError(
                    self, f"exited with {self.process.returncode} while starting"
                )
            time.sleep(0.02)
        self.kill()
        raise BrokerProcessError(self, f"not ready within {timeout_s} s")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL and reap: the broker gets no chance to close anything."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT_S)

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, wait, and assert the clean exit code 0; returns it."""
        assert self.process is not None, "never started"
        assert self.process.poll() is None, "not running"
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise BrokerProcessError(
                self, f"did not stop within {timeout_s} s of SIGTERM"
            ) from None
        if code != 0:
            raise BrokerProcessError(self, f"exited with {code} after SIGTERM")
        return code

    def restart(self, *, clean: bool = False) -> BrokerProcess:
        """Stop (SIGKILL, or SIGTERM with ``clean``) and start again on the same port
        and data directory."""
        if clean:
            self.terminate()
        else:
            self.kill()
        return self.start()

    # -- clients ----------------------------------------------------------------------
    def channel(self) -> grpc.Channel:
        """A new channel to this broker (the caller closes it)."""
        from dataplane.client.connection import CHANNEL_OPTIONS

        return grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"BrokerProcess(id={self.broker_id}, {self.address}, {state})"


class BrokerProcessError(AssertionError):
    """A broker did not start or stop as expected; the message ends with its log."""

    def __init__(self, broker: BrokerProcess, what: str) -> None:
        tail = broker.log_text()[-8000:]
        super().__init__(f"broker {broker.broker_id} {what}; its log:\n{tail}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free right now on 127.0.0.1."""
    sockets = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def start_cluster(
    tmp_path: Path, n: int = 3, *, extra_args: Sequence[str] = ()
) -> list[BrokerProcess]:
    """Brokers 1..n under ``tmp_path/broker-<id>``, each with every other as a peer.

    Ports are picked up front so each broker starts with the full peer list. Returns once
    every broker serves (not yet necessarily seeing the others: see ``wait_for_cluster``).
    """
    ports = free_ports(n)
    addresses = {i + 1: f"127.0.0.1:{port}" for i, port in enumerate(ports)}
    brokers = [
        BrokerProcess(
            tmp_path / f"broker-{broker_id}",
            broker_id=broker_id,
            port=ports[broker_id - 1],
            peers={i: a for i, a in addresses.items() if i != broker_id},
            extra_args=extra_args,
        )
        for broker_id in addresses
    ]
    try:
        for broker in brokers:
            broker.launch()
        for broker in brokers:
            broker.wait_ready()
    except BaseException:
        stop_all(brokers)
        raise
    return brokers


def metadata(broker: BrokerProcess, topics: Iterable[str] = (), **kwargs: Any) -> Any:
    """A ``MetadataResponse`` from ``broker``."""
    with broker.channel() as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        return stub.Metadata(broker_pb2.MetadataRequest(topics=list(topics), **kwargs), timeout=10)


def wait_for_cluster(
    brokers: Sequence[BrokerProcess], topics: Iterable[str] = (), timeout_s: float = 15.0
) -> None:
    """Wait until every broker's Metadata shows every partition any broker hosts
    (``topics``: only those topics)."""
    wanted = list(topics)
    deadline = time.monotonic() + timeout_s
    while True:
        local = set()
        for broker in brokers:
            for topic in metadata(broker, wanted, local_only=True).topics:
                local.update((topic.name, p.partition, broker.broker_id) for p in topic.partitions)
        views = [_placement(metadata(broker, wanted)) for broker in brokers]
        if all(view >= local for view in views):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"brokers do not agree on the cluster within {timeout_s} s")
        time.sleep(0.05)


def _placement(response: Any) -> set[tuple[str, int, int]]:
    return {(t.name, p.partition, p.leader_id) for t in response.topics for p in t.partitions}


def stop_all(brokers: Iterable[BrokerProcess]) -> None:
    """Kill every broker still running (teardown: never raises for one that is gone)."""
    for broker in brokers:
        broker.kill()


__all__ = [
    "BrokerProcess",
    "BrokerProcessError",
    "free_ports",
    "metadata",
    "start_cluster",
    "stop_all",
    "wait_for_cluster",
]
