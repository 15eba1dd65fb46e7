"""The worker's rules, mostly without processes: untrusted provenance, lag figures, the
source ending before the copy, stale checkpoints, a bounded stop, configuration errors;
and, with a worker, a record too large for the target. (The copy rule itself is the
SDK's: tests/dataplane/client/test_copy.py, tests/dataplane/records/test_compiled_copy.py.)"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from dataplane.client import Admin, Consumer, Producer, TopicPartition
from mirror.__main__ import parse_args
from mirror.config import Checkpoint, ConfigError, parse_config
from mirror.copier import Copier
from mirror.progress import Call, PartitionProgress
from mirror.provenance import origin, parse_offset
from mirror.resume import StoppingError, find_resume, settle
from tests.mirror.support import produce
from tests.support.mirror import Region, WorkerProcess, link_config, origin_of, read_all

TOPIC = "acme.orders"
YEAR_MS = 365 * 24 * 3600 * 1000


def _config(**extra: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "link": "acme/east-to-west", "link_id": 7, "generation": 1,
        "from_region": "east", "to_region": "west",
        "source": {"bootstrap": ["127.0.0.1:1"]}, "target": {"bootstrap": ["127.0.0.1:2"]},
        "topics": [{"source": TOPIC, "target": TOPIC, "partitions": [0]}],
    }  # fmt: skip
    return {**document, **extra}


@pytest.mark.parametrize(
    "value",
    [None, b"", b"-1", b"+1", b" 1", b"1.0", b"12a", "\u0661".encode(), b"9" * 20,
     b"9223372036854775808", b"99999999999999999999"],
)  # fmt: skip
def test_a_malformed_origin_offset_counts_as_absent(value: bytes | None) -> None:
    assert parse_offset(value) is None
    assert origin([("x-origin-region", b"east"), ("x-origin-offset", value)]) == (b"east", None)


def test_a_well_formed_origin_offset_is_read() -> None:
    assert parse_offset(b"0") == 0
    assert parse_offset(b"9223372036854775807") == 2**63 - 1
    assert parse_offset(b"0000000000000000042") == 42


def test_lag_before_the_first_resume_counts_from_the_checkpoint() -> None:
    config = _config(checkpoints={f"{TOPIC}/0": {"source_offset": 119, "target_offset": 5}})
    progress = Copier(parse_config(config)).partitions[TopicPartition(TOPIC, 0)]
    progress.source_end_offset = 150
    assert progress.lag_records() == 30
    started = progress.caught_up_ms
    assert progress.lag_seconds(started + 4000) == 4.0  # unknown: never reads 0
    progress.note_caught_up()
    assert progress.caught_up_ms == started  # not reset while the next offset is unknown


def test_lag_seconds_is_bounded_by_the_last_caught_up_time() -> None:
    progress = PartitionProgress(TOPIC, TOPIC, 0, next_source_offset=10, source_end_offset=10)
    assert progress.lag_seconds(progress.caught_up_ms + 1) == 0.0
    caught_up = progress.caught_up_ms
    progress.source_end_offset = 20
    skewed = caught_up - 3 * YEAR_MS  # a producer whose clock is three years behind
    progress.inflight.append(Call(skewed, 14, 15, 5, 50))
    assert progress.lag_seconds(caught_up + 2500) == 2.5
    recent = caught_up + 2000  # a sound clock: the record's age is the figure
    progress.inflight[0] = Call(recent, 14, 15, 5, 50)
    assert progress.lag_seconds(caught_up + 2500) == 0.5


class _Ends:
    """An admin answering fixed (log start, end) offsets."""

    def __init__(self, start: int, end: int) -> None:
        self.offsets = {"earliest": start, "latest": end}

    def list_offsets(self, wanted: dict[TopicPartition, str]) -> dict[TopicPartition, Any]:
        return {tp: (self.offsets[spec], -1) for tp, spec in wanted.items()}


def test_a_source_that_ends_before_the_copy_stays_an_error_and_shows_lag() -> None:
    copier = Copier(parse_config(_config()))
    tp = TopicPartition(TOPIC, 0)
    progress = copier.partitions[tp]
    progress.start_at(150)
    targets = {tp: tp}
    for _ in range(3):  # read every second; the error must not be cleared by the next read
        copier._read_ends(_Ends(0, 100), _Ends(0, 150), targets)  # type: ignore[arg-type]
        assert "the source log ends at 100" in progress.status(0)["error"]
    since = progress.caught_up_ms
    status = progress.status(since + 3000)
    assert status["state"] == "error"
    assert status["lag_seconds"] == 3.0
    copier._read_ends(_Ends(0, 160), _Ends(0, 150), targets)  # type: ignore[arg-type]
    assert progress.status(progress.caught_up_ms)["error"] == ""


def test_credentials_without_token_url_or_client_id_are_refused() -> None:
    for creds in ({"client_id": "a", "client_secret_file": "/s"},
                  {"token_url": "http://x", "client_secret_file": "/s"}, ["token"]):  # fmt: skip
        with pytest.raises(ConfigError):
            parse_config(_config(credentials=creds))


def test_a_secret_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"\xff\xfe secret")
    os.close(fd)
    creds = {"token_url": "http://x", "client_id": "a", "client_secret_file": str(secret)}
    config = parse_config(_config(credentials=creds))
    with pytest.raises(ConfigError, match="not UTF-8"):
        config.token_source()


@pytest.mark.parametrize("address", ["nope", "127.0.0.1:", "127.0.0.1:99999", "h:p"])
def test_a_bad_status_listen_is_a_usage_error(
    address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(["--config", "c.json", "--status-listen", address])
    assert info.value.code == 2
    assert "is not HOST:PORT" in capsys.readouterr().err
    assert parse_args(["--config", "c", "--status-listen", "[::1]:0"]).status_listen == ("::1", 0)


def test_a_checkpoint_past_the_targets_end_is_ignored_and_a_scan_stops(
    regions: tuple[Region, Region],
) -> None:
    """A copy deleted and made again is empty: a checkpoint of the old one must not make
    the new one skip records. A stop set ends the scan (and the settle wait)."""
    _, west = regions
    west.create_topic(TOPIC, 1)
    tp = TopicPartition(TOPIC, 0)
    reader = Consumer(west.bootstrap, auto_offset_reset="none", enable_auto_commit=False)
    try:
        found = find_resume(reader, tp, "east", (0, 0), Checkpoint(119, 130))
        assert found.next_source_offset is None  # the start position, not 120
        with Producer(west.bootstrap, acks="all", route_lanes=False) as producer:
            copies = [(None, b"c", [("x-origin-region", b"east"), ("x-origin-offset", b"7")])]
            producer.send_batch(TOPIC, copies * 3, partition=0).result(30)
        found = find_resume(reader, tp, "east", (0, 3), Checkpoint(119, 3))
        assert found.next_source_offset == 8
        stop = threading.Event()
        stop.set()
        with pytest.raises(StoppingError):
            find_resume(reader, tp, "east", (0, 3), None, stop)
        with Admin(west.bootstrap) as admin:
            assert settle(admin, [tp], stop) == []  # settled: returns before waiting
    finally:
        reader.close()


def test_a_record_too_large_for_the_target_stops_its_partition_without_a_skip(
    regions: tuple[Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    east, west = regions
    east.create_topic(TOPIC, 1)
    with Admin(west.brokers[0].address) as admin:
        admin.create_topic(TOPIC, 1, {"max_message_bytes": 4096})
    produce(east.bootstrap, TOPIC, 1, "east", 0, 50)
    with Producer(east.bootstrap, acks="all", route_lanes=False) as producer:
        producer.send(TOPIC, b"x" * 20_000, partition=0).result(30)  # source offset 50
    produce(east.bootstrap, TOPIC, 1, "east", 51, 50)
    worker = WorkerProcess(tmp_path / "worker", link_config(east, west, {TOPIC: 1}))
    workers.append(worker)
    worker.start()

    # Resumed after the failed session: at the record that failed, reported, not over it.
    def at_the_record(status: dict[str, Any]) -> bool:
        (p,) = status["partitions"]
        return bool(p["error"]) and (p["next_source_offset"], p["source_end_offset"]) == (50, 101)

    stopped = worker.wait_for(at_the_record)
    (partition,) = stopped["partitions"]
    assert partition["state"] == "error"
    assert "large" in partition["error"].lower()
    assert partition["lag_records"] == 51
    copies = read_all(west.bootstrap, TOPIC, 1)[0]
    assert [origin_of(r)[1] for r in copies] == list(range(50))  # nothing past the record
    assert worker.terminate() == 0
