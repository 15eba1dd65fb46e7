"""The installed ``meridian`` command, run as a real process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.brokers import BrokerProcess


def meridian() -> list[str]:
    script = Path(sys.executable).with_name("meridian")
    if script.exists():
        return [str(script)]
    found = shutil.which("meridian")
    return [found] if found else [sys.executable, "-m", "dataplane.cli"]


def run(broker: BrokerProcess, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MERIDIAN_BOOTSTRAP": broker.address}
    return subprocess.run(
        [*meridian(), *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
    )


def test_meridian_process_round_trip(cli_broker: BrokerProcess) -> None:
    """MERIDIAN_BOOTSTRAP finds the broker; lines go in and come back; errors exit 1."""
    assert run(cli_broker, "topics", "create", "cli.process", "--partitions", "1").returncode == 0
    produced = run(cli_broker, "produce", "cli.process", stdin="one\ntwo\n")
    assert produced.returncode == 0, produced.stderr

    consumed = run(cli_broker, "consume", "cli.process", "--from-beginning", "--max-messages", "2")

    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["one", "two"]
    failed = run(cli_broker, "topics", "create", "cli.process")
    assert failed.returncode == 1
    assert failed.stderr.startswith("error: TOPIC_ALREADY_EXISTS: ")
    assert "Traceback" not in failed.stderr
