"""The writer that ``test_crash.py`` runs in a subprocess and kills with SIGKILL.

Usage: ``python crash_writer.py DIRECTORY ACKS_FILE RUN PARAMS_JSON``.

It opens the log in DIRECTORY with ``durability=always``, prints ``ready`` and what its
recovery found (``ready CLEAN TRUNCATED_BYTES CORRUPT_REGIONS``) once the log is open,
then has ``WriterParams.threads`` threads append batches until it is killed.
Thread ``t`` of run ``r`` appends batches ``(r, t, 0), (r, t, 1), ...`` in order; the
content of each is a pure function of that id (``build_batch``), so a checker can rebuild
every batch byte for byte. After an append returns, its thread writes one line
``"run thread seq base_offset last_offset\\n"`` to ACKS_FILE with a single ``write`` on
an ``O_APPEND`` descriptor: a line is never torn or interleaved, and its presence proves
the append returned. The page cache survives SIGKILL, so no fsync of the file is needed.

A failing append is a bug: the writer prints the traceback and exits with status 70,
which the test reports (a killed writer exits by signal instead).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import threading
import traceback
from dataclasses import asdict, dataclass
from typing import NamedTuple

from dataplane.records import BatchBuilder, Compression
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog, RecoveryReport

READY_WORD = "ready"
FAILURE_EXIT_STATUS = 70
_BASE_TIMESTAMP_MS = 1_700_000_000_000
_CODECS = tuple(Compression)


class BatchId(NamedTuple):
    run: int
    thread: int
    seq: int

    def __str__(self) -> str:
        return f"{self.run}:{self.thread}:{self.seq}"

    @classmethod
    def parse(cls, text: str) -> BatchId:
        run, thread, seq = (int(part) for part in text.split(":"))
        return cls(run, thread, seq)


class OpenReport(NamedTuple):
    """The part of a ``RecoveryReport`` the crash test checks; the writer prints its own."""

    clean_shutdown: bool
    truncated_bytes: int
    corrupt_regions: int

    @classmethod
    def of(cls, report: RecoveryReport) -> OpenReport:
        return cls(report.clean_shutdown, report.truncated_bytes, len(report.corrupt))

    def ready_line(self) -> str:
        clean = int(self.clean_shutdown)
        return f"{READY_WORD} {clean} {self.truncated_bytes} {self.corrupt_regions}"

    @classmethod
    def parse(cls, line: str) -> OpenReport:
        word, clean, truncated, corrupt = line.split()
        if word != READY_WORD:
            raise ValueError(f"not a ready line: {line!r}")
        return cls(clean == "1", int(truncated), int(corrupt))


class ExpectedRecord(NamedTuple):
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclass(frozen=True, slots=True)
class WriterParams:
    """What the writer and the checker must agree on: log config and batch shapes."""

    threads: int = 4
    max_segment_bytes: int = 256 * 1024
    index_interval_bytes: int = 4096
    max_index_bytes: int = 10 * 1024 * 1024
    max_records: int = 50
    max_value_bytes: int = 200

    def log_config(self) -> LogConfig:
        return LogConfig(
            durability=Durability.ALWAYS,
            max_segment_bytes=self.max_segment_bytes,
            index_interval_bytes=self.index_interval_bytes,
            max_index_bytes=self.max_index_bytes,
            retention_ms=-1,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WriterParams:
        return cls(**json.loads(text))


def record_key(batch_id: BatchId, index: int) -> bytes:
    return f"{batch_id}:{index}".encode()


def batch_id_of_key(key: bytes) -> BatchId:
    """The id of the batch a record key (``run:thread:seq:index``) belongs to."""
    return BatchId.parse(key.decode().rsplit(":", 1)[0])


def expected_batch(
    params: WriterParams, batch_id: BatchId
) -> tuple[Compression, list[ExpectedRecord]]:
    """The codec and records of batch ``batch_id``: a pure function of its id."""
    digest = hashlib.sha256(f"batch {batch_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest, "big"))
    codec = rng.choice(_CODECS)
    base_timestamp = _BASE_TIMESTAMP_MS + batch_id.run * 10_000_000 + batch_id.seq * 100
    expected = []
    for index in range(rng.randint(1, params.max_records)):
        key = record_key(batch_id, index)
        value = _derived_bytes(key, rng.randint(0, params.max_value_bytes))
        headers = (("id", key), ("len", str(len(value)).encode()))
        expected.append(ExpectedRecord(key, value, headers, base_timestamp + index))
    return codec, expected


def _derived_bytes(seed: bytes, length: int) -> bytes:
    """``length`` bytes derived from ``seed``: half SHAKE-128 output, half one repeated byte."""
    return hashlib.shake_128(seed).digest(length - length // 2) + seed[:1] * (length // 2)


def build_batch(params: WriterParams, batch_id: BatchId) -> bytes:
    """The exact bytes the writer appends for ``batch_id`` (base offset 0, no epoch)."""
    return encode_batch(*expected_batch(params, batch_id))


def encode_batch(codec: Compression, expected: list[ExpectedRecord]) -> bytes:
    builder = BatchBuilder(compression=codec)
    for record in expected:
        builder.append(
            record.value, key=record.key, timestamp=record.timestamp, headers=record.headers
        )
    return builder.build()


def _append_forever(
    log: PartitionLog, ack_fd: int, params: WriterParams, run: int, thread: int
) -> None:
    seq = 0
    try:
        while True:
            info = log.append(build_batch(params, BatchId(run, thread, seq)))
            line = f"{run} {thread} {seq} {info.base_offset} {info.last_offset}\n".encode()
            if os.write(ack_fd, line) != len(line):
                raise OSError(f"short write of the ack line {line!r}")
            seq += 1
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(FAILURE_EXIT_STATUS)


def main(argv: list[str]) -> None:
    directory, acks_path, run, params_json = argv
    params = WriterParams.from_json(params_json)
    log = PartitionLog.open(directory, params.log_config())
    ack_fd = os.open(acks_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    threads = [
        threading.Thread(target=_append_forever, args=(log, ack_fd, params, int(run), t))
        for t in range(params.threads)
    ]
    for thread in threads:
        thread.start()
    print(OpenReport.of(log.recovery).ready_line(), flush=True)
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main(sys.argv[1:])
