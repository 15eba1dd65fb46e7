"""Local broker processes: the launcher behind the demo, the test harness and the control
plane's default provisioner.

``LocalBroker(broker_id, port, data_dir, peers)`` runs ``python -m dataplane.broker`` on
127.0.0.1 with ``data_dir``; its ready file and its log (stdout and stderr) sit next to
the data directory. Port 0 lets the broker choose one: ``start()`` reads it from the
ready file and keeps it, so ``restart()`` comes back on the same address.
With ``kafka_port`` set (0: any port, kept once chosen) the broker also serves Kafka's
wire protocol there (``kafka_address``).
``LocalCluster(data_root, size=3).start()`` starts ``size`` brokers, each knowing every
other, with ports chosen up front. ``stop()`` sends SIGTERM and waits for a clean exit;
``kill()`` sends SIGKILL. Brokers hold the lifeline (``dataplane.lifeline``) of the
process that launched them, so they stop when it ends, SIGKILL included.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dataplane import lifeline

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_SOURCE_ROOT = Path(__file__).resolve().parents[1]


class BrokerStartError(RuntimeError):
    """A broker exited or did not become ready; the message ends with its log."""


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class LocalBroker:
    """One broker process; see the module docstring."""

    broker_id: int
    port: int
    data_dir: Path
    peers: dict[int, str] = field(default_factory=dict)
    region: str = ""  # empty: the broker's own default (or its config file's)
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    metrics_port: int = 0
    kafka_port: int | None = None  # None: no Kafka listener; 0: any port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def kafka_address(self) -> str:
        """``127.0.0.1:PORT`` of the Kafka listener (once started with ``kafka_port``)."""
        if not self.kafka_port:
            raise BrokerStartError(f"broker {self.broker_id} serves no Kafka listener (yet)")
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def ready_file(self) -> Path:
        return self.data_dir.parent / f"broker-{self.broker_id}.ready"

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / f"broker-{self.broker_id}.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "dataplane.broker", "--id", str(self.broker_id)]
        args += ["--listen", self.address, "--data-dir", str(self.data_dir)]
        args += ["--ready-file", str(self.ready_file), "--metrics-listen", "127.0.0.1:0"]
        if self.kafka_port is not None:
            args += ["--kafka-listen", f"127.0.0.1:{self.kafka_port}"]
        if self.region:
            args += ["--region", self.region]
        for peer_id, address in sorted(self.peers.items()):
            args += ["--peer", f"{peer_id}={address}"]
        return args + self.extra_args

    def log_text(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log_file.read_text(errors="replace")
        return ""

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, timeout_s: float = READY_TIMEOUT_S) -> LocalBroker:
        """Start the process and return once it serves (``BrokerStartError`` otherwise)."""
        self.launch()
        self.wait_ready(timeout_s)
        return self

    def launch(self) -> None:
        """Start the process without waiting for it (then ``wait_ready``)."""
        if self.running:
            raise BrokerStartError(f"broker {self.broker_id} is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        line = lifeline.for_children()  # the broker stops when this process ends
        env = {**os.environ, "PYTHONUNBUFFERED": "1", lifeline.ENV: str(line)}
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(_SOURCE_ROOT), env.get("PYTHONPATH")])
        )
        with self.log_file.open("ab") as log_file:
            log_file.write(f"--- start: {' '.join(self.command())}\n".encode())
            log_file.flush()
            self.process = subprocess.Popen(
                self.command(), stdout=log_file, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, pass_fds=(line,),
            )  # fmt: skip

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until the launched process serves (its ready file names its pid)."""
        assert self.process is not None, "never launched"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                ready = json.loads(self.ready_file.read_text())
                if ready.get("pid") == self.process.pid:
                    self.port = int(ready["port"])
                    self.metrics_port = int(ready.get("metrics_port") or 0)
                    if self.kafka_port is not None:
                        self.kafka_port = int(ready.get("kafka_port") or 0)
                    return
            if self.process.poll() is not None:
                raise self._error(f"exited with {self.process.returncode} while starting")
            time.sleep(0.02)
        self.kill()
        raise self._error(f"was not ready within {timeout_s} s")

    def _error(self, what: str) -> BrokerStartError:
        return BrokerStartError(
            f"broker {self.broker_id} {what}; its log:\n{self.log_text()[-8000:]}"
        )

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then wait; returns the exit code (SIGKILL after ``timeout_s``)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def kill(self) -> int:
        """SIGKILL and reap: the broker gets no chance to flush or checkpoint."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT_S)
        return self.process.returncode

    def restart(self, *, clean: bool = False) -> LocalBroker:
        """Stop (SIGKILL, or SIGTERM with ``clean``) and start again on the same port
        and data directory."""
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()


class LocalCluster:
    """``size`` brokers (ids 1..size) on 127.0.0.1, broker ``i`` in ``data_root/broker-i``."""

    def __init__(
        self,
        data_root: Path | str,
        size: int = 3,
        *,
        ports: list[int] | None = None,
        region: str = "local",
        extra_args: list[str] | None = None,
        kafka: bool = False,
    ) -> None:
        """``kafka``: every broker also serves Kafka's protocol (ports chosen up front)."""
        root = Path(data_root)
        ports = ports or free_ports(size)
        kafka_ports = free_ports(size) if kafka else [None] * size
        peers = {i + 1: f"127.0.0.1:{port}" for i, port in enumerate(ports)}
        self.brokers = [
            LocalBroker(
                broker_id,
                ports[broker_id - 1],
                root / f"broker-{broker_id}",
                {pid: a for pid, a in peers.items() if pid != broker_id},
                region=region,
                extra_args=list(extra_args or []),
                kafka_port=kafka_ports[broker_id - 1],
            )
            for broker_id in peers
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def kafka_bootstrap(self) -> str:
        """``bootstrap.servers`` for Kafka clients (a cluster started with ``kafka``)."""
        return ",".join(b.kafka_address for b in self.brokers)

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> LocalCluster:
        """Launch every broker at once, then wait for each (stopping all on failure)."""
        try:
            for broker in self.brokers:
                broker.launch()
            for broker in self.brokers:
                broker.wait_ready(timeout_s)
        except BaseException:
            self.kill()
            raise
        return self

    def stop(self) -> list[int]:
        return [broker.stop() for broker in self.brokers]

    def kill(self) -> None:
        for broker in self.brokers:
            broker.kill()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
