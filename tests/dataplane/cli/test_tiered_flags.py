"""meridian topics create / alter with the tiered storage flags (and the segment flags,
which say when a segment is sealed, hence uploaded), against a broker with an object
store (a folder): a tiered topic gets a topic_id, which an alter keeps; describe shows
the settings it reports."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane.cli import topics
from dataplane.client.admin import PartitionDescription, TopicDescription
from tests.dataplane.cli.conftest import Cli
from tests.support.brokers import BrokerProcess, stop_all


@pytest.fixture(scope="module")
def tiered_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    base = Path(tmp_path_factory.mktemp("tiered-cli"))
    (base / "objects").mkdir()
    process = BrokerProcess(
        base, broker_id=1, extra_args=["--remote-store-uri", str(base / "objects")]
    )
    try:
        yield Cli(process.start().address)
    finally:
        stop_all([process])


def _settings(described: str) -> dict[str, str]:
    rows = (line.split() for line in described.splitlines())
    return {row[0]: row[1] for row in rows if len(row) == 2}


def test_create_with_the_tiered_flags(tiered_cli: Cli) -> None:
    tiered_cli.ok(
        "topics", "create", "cli.tiered", "--remote-storage",
        "--local-retention-ms", "60000", "--local-retention-bytes", "1048576",
    )  # fmt: skip

    settings = _settings(tiered_cli.ok("topics", "describe", "cli.tiered").stdout)

    assert settings["remote_storage"] == "True"
    assert (settings["local_retention_ms"], settings["local_retention_bytes"]) == (
        "60000",
        "1048576",
    )
    assert re.fullmatch("[0-9a-f]{32}", settings["topic_id"])  # a tiered topic needs an id


def test_alter_changes_only_what_it_names(tiered_cli: Cli) -> None:
    tiered_cli.ok("topics", "create", "cli.alter", "--config", "retention_ms=3600000")

    altered = tiered_cli.ok(
        "topics", "alter", "cli.alter", "--remote-storage", "--config", "local_retention_ms=600000"
    )

    assert "altered topic cli.alter" in altered.stdout
    settings = _settings(tiered_cli.ok("topics", "describe", "cli.alter").stdout)
    assert (settings["remote_storage"], settings["local_retention_ms"]) == ("True", "600000")
    assert settings["retention_ms"] == "3600000"
    topic_id = settings["topic_id"]
    tiered_cli.ok("topics", "alter", "cli.alter", "--remote-storage", "--local-retention-ms", "1")
    again = _settings(tiered_cli.ok("topics", "describe", "cli.alter").stdout)
    assert (again["topic_id"], again["local_retention_ms"]) == (topic_id, "1")  # kept


def test_the_segment_flags_set_when_a_segment_is_sealed(tiered_cli: Cli) -> None:
    tiered_cli.ok(
        "topics", "create", "cli.segments", "--remote-storage",
        "--segment-bytes", "1048576", "--segment-ms", "60000",
    )  # fmt: skip

    settings = _settings(tiered_cli.ok("topics", "describe", "cli.segments").stdout)
    assert (settings["max_segment_bytes"], settings["segment_ms"]) == ("1048576", "60000")

    altered = tiered_cli.ok("topics", "alter", "cli.segments", "--segment-ms", "120000")
    assert "segment_ms=120000" in altered.stdout
    again = _settings(tiered_cli.ok("topics", "describe", "cli.segments").stdout)
    assert (again["max_segment_bytes"], again["segment_ms"]) == ("1048576", "120000")


def test_the_broker_refuses_a_segment_below_its_floor(tiered_cli: Cli) -> None:
    refused = tiered_cli("topics", "create", "cli.tiny", "--segment-bytes", "100")

    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: INVALID_CONFIG: ")
    assert "max_segment_bytes" in refused.stderr


def test_the_broker_refuses_turning_remote_storage_off(tiered_cli: Cli) -> None:
    tiered_cli.ok("topics", "create", "cli.once", "--config", "remote_storage=true")

    refused = tiered_cli("topics", "alter", "cli.once", "--no-remote-storage")

    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: INVALID_CONFIG: ")


def test_a_bad_boolean_and_an_empty_alter_are_refused_before_any_call(tiered_cli: Cli) -> None:
    bad = tiered_cli("topics", "create", "cli.bad", "--config", "remote_storage=maybe")
    assert bad.exit_code != 0
    assert "remote_storage takes true or false" in bad.stderr
    empty = tiered_cli("topics", "alter", "cli.bad")
    assert empty.exit_code != 0
    assert "nothing to change" in empty.stderr


class _TieredAdmin:
    """An ``Admin`` whose one topic has segments in the object store (no broker has
    uploaded any yet when this test runs: the sizes are made up)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __enter__(self) -> _TieredAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def describe_topic(self, name: str) -> TopicDescription:
        partition = PartitionDescription(
            0, 1, 0, 500, 500, size_bytes=4096, segments=1, config={"remote_storage": True},
            remote_bytes=3_000_000, remote_segments=6,
        )  # fmt: skip
        return TopicDescription(name, [partition])


def test_describe_shows_remote_bytes_when_there_are_some(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(topics, "Admin", _TieredAdmin)

    described = Cli("127.0.0.1:1").ok("topics", "describe", "cli.remote").stdout

    assert "4,096 bytes, 3,000,000 bytes in the object store" in described
    assert "remote bytes" in described
    row = next(line.split() for line in described.splitlines() if line.split()[:1] == ["0"])
    assert row[-3:] == ["3,000,000", "6", "online"]
