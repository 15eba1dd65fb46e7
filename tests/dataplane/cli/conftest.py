"""Fixtures for CLI tests: one broker process per module, the CLI invoked in-process.

``cli("topics", "list")`` runs ``meridian --bootstrap <broker> topics list`` through
typer's ``CliRunner`` and returns its ``Result``; ``cli.ok(...)`` also checks that it
exited with 0. ``topic`` is a fresh two-partition topic named after the test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from dataplane.cli import app
from tests.support.brokers import BrokerProcess, stop_all


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(Path(tmp_path_factory.mktemp("cli-broker")), broker_id=1)
    try:
        yield process.start()
    finally:
        stop_all([process])


@dataclass
class Cli:
    bootstrap: str
    runner: CliRunner = field(default_factory=CliRunner)

    def __call__(self, *args: str, input: str | bytes | None = None) -> Result:
        return self.runner.invoke(app, ["--bootstrap", self.bootstrap, *args], input=input)

    def ok(self, *args: str, input: str | bytes | None = None) -> Result:
        result = self(*args, input=input)
        assert result.exit_code == 0, (
            f"meridian {' '.join(args)} exited with {result.exit_code}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}\nexception: {result.exception!r}"
        )
        return result


@pytest.fixture
def cli(cli_broker: BrokerProcess) -> Cli:
    return Cli(cli_broker.address)


@pytest.fixture
def topic(cli: Cli, request: pytest.FixtureRequest) -> str:
    name = "cli." + re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name).strip("-")[:80]
    cli.ok("topics", "create", name, "--partitions", "2")
    return name
