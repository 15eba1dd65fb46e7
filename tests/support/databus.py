"""A real ``meridian-databus`` process for tests, on fixed local ports so writers find it
again after a restart.

    agent = AgentProcess(tmp_path / "agent", bootstrap, config_file=path).start()
    agent.http_url, agent.grpc_target, agent.token
    agent.kill()        # SIGKILL
    agent.start()       # the same data directory and ports
    agent.terminate()   # SIGTERM; asserts a clean exit
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from dataplane.local import free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]


class AgentProcess:
    def __init__(
        self, directory: Path, bootstrap: str, *, args: list[str], env: dict[str, str] | None = None
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.bootstrap = bootstrap
        self.args = args
        self.env = env or {}
        http_port, grpc_port = free_ports(2)
        self.http = f"127.0.0.1:{http_port}"
        self.grpc_target = f"127.0.0.1:{grpc_port}"
        self.socket = str(self.directory / "data" / "databus.sock")
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def http_url(self) -> str:
        return f"http://{self.http}"

    @property
    def token(self) -> str:
        return (self.directory / "data" / "ingest-token").read_text().strip()

    def start(self, timeout_s: float = 30.0) -> AgentProcess:
        self.starts += 1
        log = open(self.directory / "agent.log", "ab")  # noqa: SIM115 - the child keeps it
        command = [
            sys.executable, "-m", "databus",
            "--data-dir", str(self.directory / "data"),
            "--bootstrap", self.bootstrap,
            "--http", self.http,
            "--grpc", self.grpc_target,
            *self.args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=log, stderr=log, env={**os.environ, **self.env}
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the agent exited:\n" + self.log_text()[-4000:]
            try:
                self.health()
                return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the agent did not answer:\n" + self.log_text()[-4000:])

    def health(self) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(self.http_url + "/healthz", timeout=5) as answer:
                return dict(json.loads(answer.read()))
        except urllib.error.HTTPError as err:
            return dict(json.loads(err.read()))

    def metrics(self) -> str:
        with urllib.request.urlopen(self.http_url + "/metrics", timeout=5) as answer:
            return str(answer.read().decode())

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def terminate(self, timeout_s: float = 30.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout_s)
        assert code == 0, f"the agent exited with {code}:\n" + self.log_text()[-4000:]
        return code

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def log_text(self) -> str:
        path = self.directory / "agent.log"
        return path.read_text(errors="replace") if path.exists() else ""
