"""Bad input gets a typed error on one line and a non-zero exit code, never a traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dataplane.cli import app
from tests.dataplane.cli.conftest import Cli
from tests.support.brokers import free_ports


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["topics", "create", "no-tenant"], "INVALID_TOPIC"),
        (["topics", "create", "cli.bad-config", "--config", "retention_ms=soon"], "INVALID_CONFIG"),
        (["topics", "create", "cli.bad-config", "--config", "colour=blue"], "INVALID_CONFIG"),
        (["topics", "create", "cli.bad-config", "--config", "no-equals"], "INVALID_CONFIG"),
        (["topics", "create", "cli.zero", "--partitions", "0"], "INVALID_PARTITIONS"),
        (["topics", "delete", "cli.never-created"], "UNKNOWN_TOPIC_OR_PARTITION"),
        (["produce", "cli.never-created"], "UNKNOWN_TOPIC_OR_PARTITION"),
        (["consume", "cli.never-created", "--max-messages", "1"], "UNKNOWN_TOPIC_OR_PARTITION"),
        (["offsets", "cli.never-created"], "UNKNOWN_TOPIC_OR_PARTITION"),
        (["groups", "describe", "cli-never-joined"], "GROUP_ID_NOT_FOUND"),
    ],
)
def test_refused_input_is_a_typed_error(cli: Cli, args: list[str], code: str) -> None:
    result = cli(*args)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {code}: "), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_line_without_separator_stops_after_keeping_the_lines_before(
    cli: Cli, topic: str
) -> None:
    """Line 3 lacks the separator: INVALID_RECORD, and lines 1-2 are stored."""
    result = cli(
        "produce", topic, "--partition", "0", "--key-separator", ":", input="a:1\nb:2\nc\nd:4\n"
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("error: INVALID_RECORD: line 3 has no key separator ':'")

    back = cli.ok(
        "consume", topic, "--from-beginning", "--max-messages", "2", "--timeout-ms", "3000"
    )
    assert back.stdout.splitlines() == ["1", "2"]


def test_an_unreachable_bootstrap_is_broker_not_available() -> None:
    [port] = free_ports(1)
    result = CliRunner().invoke(app, ["--bootstrap", f"127.0.0.1:{port}", "topics", "list"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: BROKER_NOT_AVAILABLE: ")


def test_usage_mistakes_exit_2() -> None:
    """--offset without --partition is a usage error (typer's exit code 2)."""
    result = CliRunner().invoke(app, ["consume", "cli.x", "--offset", "3"])
    assert result.exit_code == 2
    assert "--offset needs --partition" in result.output
