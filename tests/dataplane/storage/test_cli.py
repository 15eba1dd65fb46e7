"""meridian-storage: dump and verify a partition directory."""

from __future__ import annotations

from pathlib import Path

from dataplane.records import iter_batches
from dataplane.storage.cli import main
from dataplane.storage.config import LogConfig
from dataplane.storage.log import PartitionLog

from .support import make_batch


def _log(path: Path) -> None:
    log = PartitionLog.open(path, LogConfig(max_segment_bytes=2048))
    for b in range(12):
        log.append(make_batch([b"v" * 100] * 3, timestamps=[b * 10] * 3))
    log.close()


def test_dump_lists_segments_and_batches(tmp_path, capsys):
    _log(tmp_path / "t-0")
    assert main(["dump", str(tmp_path / "t-0"), "--batches"]) == 0
    out = capsys.readouterr().out
    assert "offsets [0, 36)" in out
    assert out.count("  segment ") >= 2
    assert out.count("    batch ") == 12
    assert "batch 33..35 (3 records" in out


def test_verify_exits_1_and_names_a_corrupt_batch(tmp_path, capsys):
    _log(tmp_path / "t-0")
    assert main(["verify", str(tmp_path / "t-0")]) == 0
    first = sorted((tmp_path / "t-0").glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    position = list(iter_batches(bytes(data)))[1][0]
    data[position + 70] ^= 0xFF
    first.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "t-0")]) == 1
    out = capsys.readouterr().out
    assert (
        f"CORRUPT segment 0: {position} corrupt bytes at position {position} (from offset 3)" in out
    )
    assert "bad CRC" in out


def test_a_directory_without_a_log_is_refused(tmp_path, capsys):
    assert main(["verify", str(tmp_path)]) == 2
    assert "not a partition directory" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_data_directory_held_by_a_running_broker_is_refused(tmp_path, capsys):
    from dataplane.storage.manager import LogManager

    with LogManager(tmp_path) as manager:
        manager.get_or_create_log("t", 0).append(make_batch([b"live"]))
        assert main(["verify", str(tmp_path / "t-0")]) == 2
        assert "in use by a running broker" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "t-0")]) == 0
