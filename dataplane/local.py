"""Local broker processes: the launcher behind the demo and the control plane's default
provisioner.

``LocalCluster(data_root, size=3).start()`` starts ``size`` broker processes on
127.0.0.1, each with its own data directory under ``data_root`` and the full peer list,
and returns once every broker reports ready (its ready file). Ports are chosen up front
(free ports, or the ones given) so every broker knows every peer. ``stop()`` sends
SIGTERM and waits for clean exits; ``kill()`` sends SIGKILL.
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
from typing import IO

READY_TIMEOUT_S = 60.0


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
    """One broker process; ``start()`` returns once it serves."""

    broker_id: int
    port: int
    data_dir: Path
    peers: dict[int, str] = field(default_factory=dict)
    region: str = "local"
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    metrics_port: int = 0
    _log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ready_file(self) -> Path:
        return self.data_dir.parent / f"broker-{self.broker_id}.ready"

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / f"broker-{self.broker_id}.log"

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "dataplane.broker", "--id", str(self.broker_id)]
        args += ["--listen", self.address, "--data-dir", str(self.data_dir)]
        args += ["--region", self.region, "--ready-file", str(self.ready_file)]
        args += ["--metrics-listen", "127.0.0.1:0"]
        for peer_id, address in sorted(self.peers.items()):
            args += ["--peer", f"{peer_id}={address}"]
        return args + self.extra_args

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> LocalBroker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)
        self._log = self.log_file.open("ab")
        self.process = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"broker {self.broker_id} exited with {self.process.returncode}; "
                    f"log:\n{self.tail_log()}"
                )
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                info = json.loads(self.ready_file.read_text())
                if info.get("pid") == self.process.pid:
                    self.metrics_port = int(info.get("metrics_port") or 0)
                    return
            time.sleep(0.05)
        raise TimeoutError(
            f"broker {self.broker_id} not ready in {timeout_s} s; log:\n{self.tail_log()}"
        )

    def tail_log(self, lines: int = 40) -> str:
        with contextlib.suppress(FileNotFoundError):
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        return ""

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code (SIGKILL after ``timeout_s``)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self._finish()

    def kill(self) -> int:
        """SIGKILL: no chance to flush or checkpoint."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        return self._finish()

    def _finish(self) -> int:
        code = self.process.returncode if self.process is not None else 0
        if self._log is not None:
            self._log.close()
            self._log = None
        return code


class LocalCluster:
    """``size`` brokers (ids 1..size) on 127.0.0.1 under ``data_root``."""

    def __init__(
        self,
        data_root: Path | str,
        size: int = 3,
        *,
        ports: list[int] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        root = Path(data_root)
        ports = ports or free_ports(size)
        peers = {i + 1: f"127.0.0.1:{port}" for i, port in enumerate(ports)}
        self.brokers = [
            LocalBroker(
                broker_id,
                int(address.rsplit(":", 1)[1]),
                root / f"broker-{broker_id}",
                {pid: a for pid, a in peers.items() if pid != broker_id},
                extra_args=list(extra_args or []),
            )
            for broker_id, address in peers.items()
        ]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def start(self) -> LocalCluster:
        try:
            for broker in self.brokers:
                broker.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> list[int]:
        return [broker.stop() for broker in self.brokers]

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
