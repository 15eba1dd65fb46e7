"""Private files and directories keep their modes (0700/0600) whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.core.private_files import (
    private_dir,
    private_file,
    read_or_create_private,
    write_private,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000, 0o777], ids=["umask022", "umask000", "umask777"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def test_every_directory_made_is_0700_parents_included(tmp_path: Path, umask: int) -> None:
    leaf = private_dir(tmp_path / "a" / "b" / "c")
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", leaf)] == [0o700] * 3


def test_an_existing_directory_is_left_as_it_is(tmp_path: Path, umask: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    private_dir(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


def test_written_files_are_0600_in_private_directories(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "secrets" / "token"
    write_private(path, b"s3cret\n")
    assert path.read_bytes() == b"s3cret\n"
    assert (mode(path), mode(path.parent)) == (0o600, 0o700)
    write_private(path, b"rotated\n")
    assert (path.read_bytes(), mode(path)) == (b"rotated\n", 0o600)
    assert sorted(p.name for p in path.parent.iterdir()) == ["token"]  # no temporary left


def test_an_existing_file_is_narrowed_to_0600(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "controlplane.sqlite3"
    path.write_bytes(b"data")
    os.chmod(path, 0o666)
    private_file(path)
    assert (mode(path), path.read_bytes()) == (0o600, b"data")
    fresh = private_file(tmp_path / "new" / "db.sqlite3")
    assert (mode(fresh), fresh.read_bytes(), mode(fresh.parent)) == (0o600, b"", 0o700)


def test_read_or_create_makes_once_and_then_reads(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "keys" / "kek"
    made = read_or_create_private(path, lambda: b"first")
    again = read_or_create_private(path, lambda: b"second")
    assert made == again == b"first"
    assert (mode(path), mode(path.parent)) == (0o600, 0o700)
    assert sorted(p.name for p in path.parent.iterdir()) == ["kek"]


def test_read_or_create_when_another_process_published_first(tmp_path: Path) -> None:
    """The loser of the race returns the winner's content, not its own."""
    path = tmp_path / "kek"

    def make() -> bytes:
        path.write_bytes(b"theirs")  # another process publishes while this one makes
        return b"mine"

    assert read_or_create_private(path, make) == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kek"]


def test_an_existing_secret_read_is_narrowed_to_0600(tmp_path: Path, umask: int) -> None:
    """A key file an operator copied in world-readable is made private when first read."""
    path = tmp_path / "kek"
    path.write_bytes(b"operator's key")
    os.chmod(path, 0o644)
    assert read_or_create_private(path, lambda: b"never made") == b"operator's key"
    assert mode(path) == 0o600
