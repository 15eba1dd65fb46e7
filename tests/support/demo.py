"""The README's run command as a test harness: ``python -m controlplane.demo`` (the whole
platform with embedded defaults: SQLite, the local issuer, a Celery worker with beat on
the filesystem transport, two controllers and three local brokers with authentication
on), started in a data directory of the test's, read until it is running, and stopped
with SIGTERM. What it prints (API URL, tokens, the service account, the brokers) is
parsed into a ``Demo``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataplane.local import free_ports
from tests.support.brokers import REPO_ROOT

RUNNING = "Ctrl-C stops everything"


@dataclass
class Demo:
    process: subprocess.Popen[str]
    data_dir: Path
    api_port: int
    env: dict[str, str]
    output: str = ""
    _later: list[str] = field(default_factory=list)
    _drain: threading.Thread | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}/api/v1"

    def printed(self, pattern: str) -> str:
        found = re.search(pattern, self.output, re.MULTILINE)
        assert found is not None, f"{pattern!r} not printed:\n{self.output}"
        return found.group(1)

    @property
    def token(self) -> str:
        return self.printed(r"export TOKEN=(\S+)")

    @property
    def admin_token(self) -> str:
        return self.printed(r"export ADMIN_TOKEN=(\S+)")

    @property
    def bootstrap(self) -> str:
        return self.printed(r"export MERIDIAN_BOOTSTRAP=(\S+)")

    @property
    def client_id(self) -> str:
        return self.printed(r"Service account (\S+) \(role")

    @property
    def client_secret(self) -> str:
        return self.printed(r"client secret\s+(\S+)")

    @property
    def token_url(self) -> str:
        return f"{self.api}/auth/token"

    def read_until(self, marker: str, timeout_s: float) -> str:
        """Output up to the line holding ``marker`` (before ``drain_in_background``)."""
        deadline = time.monotonic() + timeout_s
        seen: list[str] = []
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            seen.append(line)
            if marker in line:
                self.output += "".join(seen)
                return "".join(seen)
        raise AssertionError(f"{marker!r} not printed; output:\n{self.output}{''.join(seen)}")

    def drain_in_background(self) -> None:
        """Keep reading the demo's output so it never blocks on a full pipe."""
        assert self.process.stdout is not None
        stdout = self.process.stdout

        def drain() -> None:
            for line in stdout:
                self._later.append(line)

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        """A REST call as ``token`` (default: the service account): (status, body)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.api + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {token or self.token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as error:
            raw = error.read()
            return error.code, (json.loads(raw) if raw else None)

    def logs(self) -> str:
        parts = [self.output, "".join(self._later)]
        for path in sorted((self.data_dir / "logs").glob("*.log")):  # not the brokers' segments
            parts.append(f"===== {path} =====\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)

    def stop(self, timeout_s: float = 60) -> str:
        """SIGTERM; what it printed after that (read by the drain thread if running)."""
        self.process.send_signal(signal.SIGTERM)
        if self._drain is not None:
            self.process.wait(timeout_s)
            self._drain.join(10)
            return "".join(self._later)
        try:
            return self.process.communicate(timeout=timeout_s)[0]
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


def start_demo(
    data_dir: Path,
    records: int,
    env: Mapping[str, str] | None = None,
    regions: str = "",
    umask: int | None = None,
) -> Demo:
    """The demo in ``data_dir``, on a free API port; ``env`` adds to a clean environment
    (none of the caller's ``MERIDIAN_*`` / ``DJANGO_*``); ``regions`` is its
    ``--regions`` (default: the demo's own, two regions mirrored both ways); ``umask``
    the one it starts with (default: the caller's)."""
    (api_port,) = free_ports(1)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MERIDIAN_", "DJANGO_"))}
    full_env = {**clean, **(env or {})}
    command = [sys.executable, "-m", "controlplane.demo", "--data-dir", str(data_dir)]
    command += ["--api-port", str(api_port), "--records", str(records)]
    command += ["--regions", regions] if regions else []
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=None if umask is None else lambda: os.umask(umask),
    )
    return Demo(process, data_dir, api_port, full_env)


@contextmanager
def running_demo(
    data_dir: Path, records: int = 100, env: Mapping[str, str] | None = None, regions: str = ""
) -> Iterator[Demo]:
    """A demo that is running (its summary printed), stopped at exit whatever happens."""
    demo = start_demo(data_dir, records, env, regions)
    try:
        demo.read_until(RUNNING, timeout_s=180)
        demo.drain_in_background()
        yield demo
    finally:
        if demo.process.poll() is None:
            demo.stop()
        wait_gone(data_dir, timeout_s=60)


def processes_of(data_dir: Path) -> list[str]:
    """Every process whose command line or environment names ``data_dir`` (the demo's
    children all do: brokers by their data directory, the others by their database)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if str(data_dir).encode() in seen:
            found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()[:200]!r}")
    return found


def wait_gone(data_dir: Path, timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := processes_of(data_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left
