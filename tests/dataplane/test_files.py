"""Small files written whole (``dataplane.files``): a reader only ever sees an old or a
new whole file, with writers racing in threads and processes and with writers SIGKILLed
in the middle of a write; modes follow ``private`` whatever the umask.

Every content is self-checking (``files_writer.check``). A SIGKILL leaves the page cache
intact, so these tests cannot catch a missing fsync; they show atomicity and isolation.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dataplane.files import create_file, replace_file
from dataplane.storage.recovery import list_directory

from .files_writer import STALLED, check, content, write_generations

WRITER = Path(__file__).with_name("files_writer.py")
LINE_TIMEOUT_S = 60.0
WRITERS = 3  # processes, and as many threads
GENERATIONS = 25
KILLS = 8


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000, 0o777], ids=["umask022", "umask000", "umask777"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


@contextlib.contextmanager
def reading(path: Path) -> Iterator[list[tuple[int, int]]]:
    """Read ``path`` in a loop in a thread while the block runs; every content must pass
    ``check``. The list yielded holds the (writer, generation) of each read once the block
    ends; what the reader found wrong is raised there."""
    stopping = threading.Event()
    seen: list[tuple[int, int]] = []

    def read() -> None:
        while not stopping.is_set():
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue  # not written yet
            seen.append(check(data))

    with ThreadPoolExecutor(1) as executor:
        reader = executor.submit(read)
        try:
            yield seen
        finally:
            stopping.set()
        reader.result()


@contextlib.contextmanager
def writers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Writer processes the block starts; any still running at its end are killed."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def start_writer(path: Path, writer: int, *args: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(WRITER), str(path), str(writer), *map(str, args)]
    # Unbuffered: a line read ahead into a buffer would hide from select() in next_line.
    return subprocess.Popen(command, stdout=subprocess.PIPE, bufsize=0)


def next_line(process: subprocess.Popen[bytes]) -> str:
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], LINE_TIMEOUT_S)
    assert readable, f"the writer said nothing for {LINE_TIMEOUT_S} s"
    return process.stdout.readline().decode().strip()


def kill(process: subprocess.Popen[bytes]) -> list[str]:
    """SIGKILL the writer; the lines it printed and no one read yet."""
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=LINE_TIMEOUT_S) == -signal.SIGKILL
    assert process.stdout is not None
    return process.stdout.read().decode().split()


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_replaced_file_holds_the_new_bytes_and_leaves_no_temporary(
    tmp_path: Path, umask: int
) -> None:
    path = tmp_path / "state.json"
    replace_file(path, b"first")
    replace_file(path, b"second")
    assert path.read_bytes() == b"second"
    assert mode(path) == 0o644 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_private_file_is_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "secret"
    replace_file(path, b"s3cret", private=True)
    assert (path.read_bytes(), mode(path)) == (b"s3cret", 0o600)
    assert create_file(tmp_path / "key", b"k", private=True)
    assert mode(tmp_path / "key") == 0o600


def test_a_failed_replace_raises_and_removes_its_temporary(tmp_path: Path) -> None:
    """The rename fails (the name is a directory): the error reaches the caller, the
    directory is untouched and no temporary file is left."""
    (tmp_path / "taken").mkdir()
    with pytest.raises(IsADirectoryError):
        replace_file(tmp_path / "taken", b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_of_racing_creators_exactly_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "kek"
    start = threading.Barrier(8)

    def create(writer: int) -> bool:
        start.wait()
        return create_file(path, content(writer, 1))

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(create, range(8)))
    assert won.count(True) == 1
    assert check(path.read_bytes()) == (won.index(True), 1)
    assert temporaries(tmp_path) == []


def test_concurrent_writers_never_show_a_reader_a_torn_file(tmp_path: Path) -> None:
    """Writers in three processes and three threads replace one file again and again
    while a reader checks every content it reads."""
    path = tmp_path / "state"
    with reading(path) as seen, writers() as processes:
        processes += [start_writer(path, writer, GENERATIONS) for writer in range(WRITERS)]
        with ThreadPoolExecutor(WRITERS) as pool:
            threads = [
                pool.submit(write_generations, path, writer, GENERATIONS, lambda _: None)
                for writer in range(WRITERS, 2 * WRITERS)
            ]
            for thread in threads:
                thread.result()
        for process in processes:
            assert process.wait(timeout=LINE_TIMEOUT_S) == 0
    assert seen, "the reader never found the file"
    assert check(path.read_bytes())[1] == GENERATIONS  # the last rename of some writer
    assert temporaries(tmp_path) == []


def test_a_writer_killed_at_random_leaves_the_old_or_the_new_file_whole(
    tmp_path: Path,
) -> None:
    """A writer replaces the file in a loop and is SIGKILLed at a random moment, again and
    again, under a reader that checks every content. After each kill the file is the last
    write the writer reported or the one it was making, never anything else."""
    path = tmp_path / "state"
    rng = random.Random(12)
    with reading(path) as seen, writers() as processes:
        for run in range(KILLS):
            processes.append(process := start_writer(path, run, 0))
            assert next_line(process) == "1"
            threading.Event().wait(rng.uniform(0.0, 0.2))
            reported = [int(line) for line in kill(process)]
            last = reported[-1] if reported else 1
            assert check(path.read_bytes()) in {(run, last), (run, last + 1)}
    assert seen


@pytest.mark.parametrize(
    ("fsync_call", "expected_generation"),
    [(1, 1), (2, 2)],
    ids=["killed-before-the-rename", "killed-after-the-rename"],
)
def test_a_writer_killed_inside_a_write_leaves_a_whole_file(
    tmp_path: Path, fsync_call: int, expected_generation: int
) -> None:
    """Killed at a known point of the second write (its data fsync, before the rename;
    or the directory's fsync, after it): the file holds write 1 or write 2 whole; a
    partition directory's load removes the temporary file a kill left."""
    path = tmp_path / "partition.json"
    with writers() as processes:
        processes.append(process := start_writer(path, 7, 2, fsync_call))
        assert next_line(process) == "1"
        assert next_line(process) == STALLED
        assert check(path.read_bytes()) == (7, expected_generation)
        kill(process)
    assert check(path.read_bytes()) == (7, expected_generation)
    if fsync_call == 1:
        assert len(temporaries(tmp_path)) == 1  # the kill landed inside the write
    list_directory(tmp_path)
    assert temporaries(tmp_path) == []
    replace_file(path, content(7, 3))
    assert check(path.read_bytes()) == (7, 3)
