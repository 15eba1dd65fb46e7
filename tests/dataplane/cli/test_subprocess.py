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


def test_consume_into_a_closed_pipe_stops_quietly(cli_broker: BrokerProcess) -> None:
    """``meridian consume ... | head -n 2``: the consumer ends with 0 and no traceback."""
    assert run(cli_broker, "topics", "create", "cli.pipe", "--partitions", "1").returncode == 0
    lines = "".join(f"line-{n}\n" for n in range(20_000))
    assert run(cli_broker, "produce", "cli.pipe", stdin=lines).returncode == 0
    env = {**os.environ, "MERIDIAN_BOOTSTRAP": cli_broker.address}
    consumer = subprocess.Popen(
        [*meridian(), "consume", "cli.pipe", "--from-beginning", "--max-messages", "20000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert consumer.stdout is not None
    first = [consumer.stdout.readline() for _ in range(2)]
    consumer.stdout.close()  # as head does once it has its lines
    assert consumer.wait(60) == 0
    assert first == [b"line-0\n", b"line-1\n"]
    stderr = consumer.stderr.read().decode() if consumer.stderr else ""
    assert "Traceback" not in stderr, stderr
    assert "Broken pipe" not in stderr, stderr
