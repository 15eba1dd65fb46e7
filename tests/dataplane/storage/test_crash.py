"""Crash recovery: SIGKILL a ``durability=always`` writer at random moments, then check.

Each test runs ``crash_writer.py`` as a real subprocess on one log directory again and
again, killing it at a random moment after it opened the log. Every run continues the
log the previous runs left. After most kills the test reopens the log itself and checks
it against an oracle built from the acknowledgement file (what the writer saw returned)
and from what earlier checks saw:

1. every acknowledged append is present, byte for byte, at exactly its acked offsets;
   point reads at the first and last offset of each batch return exactly that batch
   (every batch once, when it is new, and a sample of older ones at every check);
2. nothing partial or unknown is visible: the log reads back from 0 to the LEO as whole
   batches that pass their CRC, with dense offsets, reads' ``next_offset`` agreeing, and
   the segment files hold no other bytes; every batch decodes to exactly what a writer
   appended (its content is rebuilt from the id in its keys and compared byte for byte),
   each thread's batches appear in order with no gap or duplicate, and a batch that was
   never acknowledged appears only as its thread's last (the append in flight at a kill);
3. what the previous check verified is still the log's prefix, byte for byte;
4. recovery (the checker's, and each writer's own, which it prints) reports the
   shutdown as it was (unclean after a kill, clean after a check closed the log), no
   corrupt region, and a truncated tail only where a write was torn.

Every second kill is left unchecked, so the next writer recovers a log that a killed
writer left, and the check after it a log left by a writer that had itself recovered.

A SIGKILL tears a write only if it lands while the kernel copies a multi-page write, so
torn tails are rare; to cover their repair every time, the test also appends the first
bytes of a batch after some kills, as a torn ``pwritev`` leaves them, and checks that
the next open cuts exactly those bytes. The kills themselves never touch the files. A
SIGKILL leaves the page cache intact, so this test cannot catch a missing fsync.
"""

from __future__ import annotations

import random
import resource
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest

from dataplane import records
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.log import PartitionLog
from dataplane.storage.segment import LOG_SUFFIX

from .crash_writer import (
    FAILURE_EXIT_STATUS,
    BatchId,
    OpenReport,
    WriterParams,
    batch_id_of_key,
    build_batch,
    encode_batch,
    expected_batch,
)

WRITER = Path(__file__).with_name("crash_writer.py")
READY_TIMEOUT_S = 60.0
KILL_WAIT_TIMEOUT_S = 30.0
READ_CHUNK_BYTES = 256 * 1024
POINT_READ_SAMPLE = 64
TEAR_AFTER = (1, 2)  # run % 4: a torn write for the next writer, then for the checker
OPEN_FILES_WANTED = 4096  # a segment holds one descriptor; the roll test makes up to ~1000


class StoredBatch(NamedTuple):
    """A batch as read back from the log."""

    base_offset: int
    last_offset: int
    batch_id: BatchId
    data: bytes


@dataclass
class Oracle:
    """What the checker knows independently of the log under test."""

    params: WriterParams
    acks_path: Path
    rng: random.Random
    seen: list[StoredBatch] = field(default_factory=list)  # the log the last check verified


@dataclass
class CrashSummary:
    """What a crash loop did; printed at its end."""

    kills: int = 0
    checks: int = 0
    torn_tails_injected: int = 0
    torn_tails_natural: int = 0
    truncated_bytes: int = 0
    acked_batches: int = 0
    unacked_batches: int = 0
    batches_verified: int = 0
    point_reads: int = 0
    segments: int = 0
    log_end_offset: int = 0
    check_s: float = 0.0

    def __str__(self) -> str:
        return (
            f"{self.kills} kills, {self.checks} checks, torn tails truncated: "
            f"{self.torn_tails_natural} left by a kill, {self.torn_tails_injected} injected "
            f"({self.truncated_bytes} bytes), {self.acked_batches} acked batches, "
            f"{self.unacked_batches} unacked (in flight at a kill) kept, "
            f"{self.batches_verified} batches verified against their rebuilt content, "
            f"{self.point_reads} point reads, {self.segments} segments, "
            f"LEO {self.log_end_offset}; {self.check_s:.1f} s checking"
        )


@pytest.fixture
def open_files_for_many_segments() -> Iterator[None]:
    """Raise the soft descriptor limit (the writer inherits it) as far as the hard one allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- the writer subprocess ----------------------------------------------------------------


def run_writer_until_killed(
    directory: Path, oracle: Oracle, run: int, delay_s: float
) -> OpenReport:
    """Start writer run ``run``, let it append for ``delay_s`` after it opened the log, kill it."""
    stderr_path = directory.parent / f"writer-{run}.stderr"
    command = [sys.executable, str(WRITER), str(directory), str(oracle.acks_path), str(run)]
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [*command, oracle.params.to_json()], stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        opened = wait_for_ready(process, stderr_path)
        time.sleep(delay_s)
        assert process.poll() is None, writer_failure(process, stderr_path)
        process.send_signal(signal.SIGKILL)
        status = process.wait(timeout=KILL_WAIT_TIMEOUT_S)
        assert status == -signal.SIGKILL, writer_failure(process, stderr_path)
        return opened
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


def wait_for_ready(process: subprocess.Popen[bytes], stderr_path: Path) -> OpenReport:
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT_S)
    assert readable, f"writer not ready after {READY_TIMEOUT_S} s"
    line = process.stdout.readline().decode()
    assert line.endswith("\n"), writer_failure(process, stderr_path)
    return OpenReport.parse(line)


def writer_failure(process: subprocess.Popen[bytes], stderr_path: Path) -> str:
    status = process.poll()
    meaning = " (an append failed)" if status == FAILURE_EXIT_STATUS else ""
    return f"writer exited with {status}{meaning}; stderr:\n{stderr_path.read_text()}"


def read_acks(path: Path) -> dict[BatchId, tuple[int, int]]:
    """Acknowledged appends: batch id -> (base offset, last offset)."""
    text = path.read_text() if path.exists() else ""
    assert not text or text.endswith("\n"), f"torn ack line: {text[-80:]!r}"
    acked: dict[BatchId, tuple[int, int]] = {}
    for line in text.splitlines():
        run, thread, seq, base, last = (int(field) for field in line.split())
        batch_id = BatchId(run, thread, seq)
        assert batch_id not in acked, f"batch {batch_id} acknowledged twice"
        acked[batch_id] = (base, last)
    return acked


# -- the checker -------------------------------------------------------------------------


def check_recovered_log(
    directory: Path, oracle: Oracle, summary: CrashSummary, clean: bool | None, torn_bytes: int
) -> None:
    """Reopen the log a killed writer left and check it against the oracle; close it."""
    log = PartitionLog.open(directory, oracle.params.log_config())
    try:
        check_open_report(summary, OpenReport.of(log.recovery), clean=clean, torn_bytes=torn_bytes)
        assert log.log_start_offset == 0
        raw = read_whole_log(log)
        check_no_hidden_bytes(log, raw)
        stored = check_earlier_batches_unchanged(oracle.seen, raw)
        stored += [verify_new_batch(oracle.params, data) for data in raw[len(stored) :]]
        check_writer_order(oracle.params, stored)
        acked = read_acks(oracle.acks_path)
        summary.point_reads += check_acked_present(log, acked, stored, oracle)
        check_unacked_were_in_flight(acked, stored)
        summary.batches_verified += len(stored) - len(oracle.seen)
        oracle.seen = stored
        summary.checks += 1
        summary.acked_batches = len(acked)
        summary.unacked_batches = len(stored) - len(acked)
        summary.segments = len(log.segments)
        summary.log_end_offset = log.log_end_offset
    finally:
        log.close()


def check_open_report(
    summary: CrashSummary, report: OpenReport, *, clean: bool | None, torn_bytes: int
) -> None:
    """Recovery knew how the log was left and repaired nothing but a torn tail.

    ``clean`` None: either is right (a writer killed before it appended anything leaves
    the clean checkpoint it found). ``torn_bytes`` is a torn write ``tear_tail``
    injected: exactly it must be cut.
    """
    assert clean is None or report.clean_shutdown == clean, report
    assert report.corrupt_regions == 0, report
    if torn_bytes:
        assert report.truncated_bytes == torn_bytes, report
        summary.torn_tails_injected += 1
    elif report.truncated_bytes:
        assert not report.clean_shutdown, report
        summary.torn_tails_natural += 1
    summary.truncated_bytes += report.truncated_bytes


def tear_tail(directory: Path, params: WriterParams, run: int, rng: random.Random) -> int:
    """Leave what a write cut short by a kill leaves: the start of a batch past the last one.

    The batch has an id no writer uses (thread ``params.threads``), so keeping any of it
    fails the checks. Returns the bytes added, or 0 when the kill already tore the tail.
    """
    active = max(directory.glob("*" + LOG_SUFFIX))  # names are zero-padded base offsets
    next_offset = int(active.name[: -len(LOG_SUFFIX)])
    try:
        for _, header in records.iter_batches(active.read_bytes()):
            next_offset = header.next_offset
    except CorruptBatchError:
        return 0
    batch = bytearray(build_batch(params, BatchId(run, params.threads, 0)))
    records.set_base_offset(batch, 0, next_offset)
    torn = bytes(batch[: rng.randrange(1, len(batch))])
    with active.open("ab") as segment_file:
        segment_file.write(torn)
    return len(torn)


def read_whole_log(log: PartitionLog) -> list[bytes]:
    """Every batch from the log start to the LEO, whole, CRC-checked, offsets dense."""
    batches: list[bytes] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        start, result = offset, log.read(offset, READ_CHUNK_BYTES)
        assert result.data, f"empty read at offset {offset} below LEO {log.log_end_offset}"
        for position, header in records.iter_batches(result.data, validate=True):
            assert header.base_offset == offset, (
                f"read({start}) returned a batch at {header.base_offset} after one ending "
                f"at {offset}: a gap"
            )
            batches.append(result.data[position : position + header.size])
            offset = header.next_offset
        assert result.next_offset == offset, (
            f"a read returned batches up to {offset} but next_offset {result.next_offset}"
        )
    assert offset == log.log_end_offset
    return batches


def check_no_hidden_bytes(log: PartitionLog, batches: list[bytes]) -> None:
    """The batches read are all the segment files hold: no partial batch hides anywhere."""
    read_bytes = sum(len(batch) for batch in batches)
    file_bytes = sum(p.stat().st_size for p in log.directory.glob("*" + LOG_SUFFIX))
    assert read_bytes == log.size_bytes == file_bytes
    assert log.verify() == []


def check_earlier_batches_unchanged(
    seen: list[StoredBatch], batches: list[bytes]
) -> list[StoredBatch]:
    """What the last check verified is still the log's prefix, byte for byte.

    Those bytes were decoded and compared with their rebuilt content then, so equal bytes
    need no second decode; this keeps each check linear in what is new.
    """
    assert len(batches) >= len(seen), f"{len(seen) - len(batches)} verified batches vanished"
    for earlier, data in zip(seen, batches, strict=False):
        assert data == earlier.data, f"batch {earlier.batch_id} at {earlier.base_offset} changed"
    return list(seen)


def verify_new_batch(params: WriterParams, data: bytes) -> StoredBatch:
    """Decode the batch and check it is exactly what the writer built for its id."""
    header, decoded = records.decode_batch(data, verify_crc=True)
    base = header.base_offset
    assert [r.offset for r in decoded] == list(range(base, header.last_offset + 1))
    assert decoded[0].key is not None
    batch_id = batch_id_of_key(decoded[0].key)
    codec, expected = expected_batch(params, batch_id)
    got = [
        (r.key, r.value, tuple((h.key, h.value) for h in r.headers), r.timestamp) for r in decoded
    ]
    assert got == [tuple(record) for record in expected], f"batch {batch_id} at {base}"
    original = encode_batch(codec, expected)
    assert data[8:] == original[8:], f"batch {batch_id} at {base} differs from what was appended"
    return StoredBatch(base, header.last_offset, batch_id, data)


def check_writer_order(params: WriterParams, stored: list[StoredBatch]) -> None:
    """Runs follow each other; each thread's batches appear in order, none skipped or repeated."""
    next_seq: dict[tuple[int, int], int] = {}
    last_run = 0
    for batch in stored:
        run, thread, seq = batch.batch_id
        assert run >= last_run, (
            f"batch {batch.batch_id} at {batch.base_offset} after run {last_run}"
        )
        assert 0 <= thread < params.threads
        expected_seq = next_seq.get((run, thread), 0)
        assert seq == expected_seq, (
            f"batch {batch.batch_id} at offset {batch.base_offset}: expected seq {expected_seq}"
        )
        next_seq[run, thread] = seq + 1
        last_run = run


def check_acked_present(
    log: PartitionLog,
    acked: dict[BatchId, tuple[int, int]],
    stored: list[StoredBatch],
    oracle: Oracle,
) -> int:
    """Every acked batch sits at its acked offsets; point reads there return exactly it.

    Point reads (through the offset index) cover every batch new since the last check and
    a sample of older ones.
    """
    by_id = {batch.batch_id: batch for batch in stored}
    for batch_id, (base, last) in acked.items():
        batch = by_id.get(batch_id)
        assert batch is not None, f"acknowledged batch {batch_id} at [{base}, {last}] is lost"
        assert (batch.base_offset, batch.last_offset) == (base, last), f"batch {batch_id} moved"
    older = stored[: len(oracle.seen)]
    probed = stored[len(oracle.seen) :] + oracle.rng.sample(
        older, min(len(older), POINT_READ_SAMPLE)
    )
    for batch in probed:
        for offset in (batch.base_offset, batch.last_offset):
            assert log.read(offset, 1).data == batch.data, f"point read at offset {offset}"
    return 2 * len(probed)


def check_unacked_were_in_flight(
    acked: dict[BatchId, tuple[int, int]], stored: list[StoredBatch]
) -> None:
    """A batch never acknowledged can only be its thread's last: the append cut by the kill."""
    present = {batch.batch_id for batch in stored}
    for batch_id in present - acked.keys():
        following = batch_id._replace(seq=batch_id.seq + 1)
        assert following not in present, f"batch {batch_id} was appended but never acknowledged"


# -- the crash loop ----------------------------------------------------------------------


def crash_loop(
    tmp_path: Path,
    params: WriterParams,
    *,
    seed: int,
    kills: int,
    delay_range_s: tuple[float, float],
) -> CrashSummary:
    """Kill the writer ``kills`` times; check after even runs and after the last.

    After runs 1 and 2 (mod 4) a torn write is injected, recovered by the next writer
    and by the checker respectively.
    """
    print(f"\ncrash loop seed={seed} params={params}")
    rng = random.Random(seed)
    directory = tmp_path / "crash-0"
    oracle = Oracle(params, tmp_path / "acks.txt", rng)
    summary = CrashSummary()
    started = time.perf_counter()
    clean: bool | None = True  # how the next open will find the log (None: either way)
    torn_bytes = 0
    for run in range(kills):
        opened = run_writer_until_killed(directory, oracle, run, rng.uniform(*delay_range_s))
        check_open_report(summary, opened, clean=clean, torn_bytes=torn_bytes)
        summary.kills += 1
        torn_bytes = tear_tail(directory, params, run, rng) if run % 4 in TEAR_AFTER else 0
        acked_now = any(batch_id.run == run for batch_id in read_acks(oracle.acks_path))
        # Unclean once the run appended (or a tail was torn); unknown when it acked nothing.
        clean = None if clean is not False and not acked_now and not torn_bytes else False
        if run % 2 == 0 or run == kills - 1:  # else the next writer recovers this run's log
            checking = time.perf_counter()
            check_recovered_log(directory, oracle, summary, clean, torn_bytes)
            summary.check_s += time.perf_counter() - checking
            clean, torn_bytes = True, 0
    print(f"{summary}; {time.perf_counter() - started:.1f} s in all")
    return summary


@pytest.mark.slow
def test_sigkill_loses_no_acked_batch_and_exposes_no_partial_one(tmp_path: Path) -> None:
    """24 SIGKILLs of a 4-thread always-durable writer: acked batches survive, nothing partial."""
    summary = crash_loop(
        tmp_path, WriterParams(), seed=20_240_611, kills=24, delay_range_s=(0.05, 0.6)
    )
    assert summary.checks == 13
    assert summary.torn_tails_injected + summary.torn_tails_natural >= 12
    assert summary.acked_batches >= 24, "the writers barely appended: the test proves nothing"
    assert summary.segments >= 3, "no segment rolled"
    assert summary.batches_verified == summary.acked_batches + summary.unacked_batches
    assert summary.point_reads >= 2 * summary.batches_verified


@pytest.mark.slow
def test_sigkill_during_constant_segment_rolls_recovers_every_acked_batch(
    tmp_path: Path, open_files_for_many_segments: None
) -> None:
    """20 SIGKILLs while 4 KiB segments and 5-entry indexes roll every few batches."""
    params = WriterParams(
        max_segment_bytes=4096,
        index_interval_bytes=512,
        max_index_bytes=64,
        max_records=20,
        max_value_bytes=100,
    )
    summary = crash_loop(tmp_path, params, seed=4_096, kills=20, delay_range_s=(0.02, 0.3))
    assert summary.checks == 11
    assert summary.torn_tails_injected + summary.torn_tails_natural >= 10
    assert summary.acked_batches >= 20, "the writers barely appended: the test proves nothing"
    assert summary.segments >= summary.acked_batches // 8, "segments did not roll constantly"
