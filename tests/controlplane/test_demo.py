"""The README's run command: the whole platform with embedded defaults (SQLite, the
local issuer, a Celery worker on the filesystem transport, the controller and three
local brokers), then what it prints must work."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from dataplane.local import free_ports
from tests.support.brokers import REPO_ROOT


def _read_until(process: subprocess.Popen[str], marker: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"{marker!r} not printed; output:\n{''.join(seen)}")


def _get(url: str, token: str) -> dict[str, object]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def test_demo_runs_the_platform_and_what_it_prints_works(tmp_path: Path) -> None:
    (api_port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MERIDIAN_", "DJANGO_"))}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controlplane.demo",
            "--data-dir",
            str(tmp_path / "demo"),
            "--api-port",
            str(api_port),
            "--records",
            "2000",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = _read_until(process, "Ctrl-C stops everything", timeout_s=180)
        assert "consumed 2,000 with group demo.billing" in output
        token = re.search(r"export TOKEN=(\S+)", output)
        bootstrap = re.search(r"export MERIDIAN_BOOTSTRAP=(\S+)", output)
        assert token is not None, output
        assert bootstrap is not None, output
        api = f"http://127.0.0.1:{api_port}/api/v1"
        topic = _get(f"{api}/topics/demo.orders", token.group(1))
        assert topic["status"] == "ready"
        assert topic["partitions"] == 6
        # The service account's token sees its tenant and nothing else.
        tenants = _get(f"{api}/tenants", token.group(1))
        assert [t["slug"] for t in tenants["results"]] == ["demo"]  # type: ignore[index]
        meridian = str(Path(sys.executable).parent / "meridian")
        cli = [meridian, "--token", token.group(1)]
        cli_env = {**env, "MERIDIAN_BOOTSTRAP": bootstrap.group(1)}
        produced = subprocess.run(
            [*cli, "produce", "demo.orders"], input="from-the-cli\n", env=cli_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        described = subprocess.run(
            [*cli, "topics", "describe", "demo.orders"], env=cli_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert described.returncode == 0, described.stderr
        assert "demo.orders" in described.stdout
        # The brokers authenticate: without a token the same command is refused.
        anonymous = subprocess.run(
            [meridian, "topics", "describe", "demo.orders"], env=cli_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert anonymous.returncode == 1
        assert "UNAUTHENTICATED" in anonymous.stderr
    finally:
        process.send_signal(signal.SIGINT)
        try:
            rest = process.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert process.returncode == 0, rest
    assert "stopping" in rest
    leftovers = subprocess.run(
        ["pgrep", "-f", str(tmp_path / "demo")], capture_output=True, text=True
    ).stdout.split()
    assert leftovers == [], f"processes of the demo still running: {leftovers}"
