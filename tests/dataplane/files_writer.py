"""The writer that ``test_files.py`` runs in subprocesses (and threads), and the check of
what it writes.

Usage: ``python files_writer.py PATH WRITER GENERATIONS [STALL_AT_FSYNC]``.

Writes generations ``1, 2, ...`` (forever when GENERATIONS is 0) of PATH with
``replace_file`` and prints each generation once its write returned. Every content is
self-checking (``content``/``check``): a header naming the writer, the generation, the
length and the SHA-256 of a payload whose size varies from write to write, so a mix of
two writes, a prefix or an empty file cannot pass ``check``.

With STALL_AT_FSYNC = n, the ``n``-th fsync of the first write after generation 1 prints
``stalled`` and never returns, so the test can kill the writer at a known point: n = 1 is
the temporary file's fsync (before the rename), n = 2 the directory's (after it).
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from dataplane.files import replace_file

STALLED = "stalled"
_HEADER = struct.Struct(">IQI32s")  # writer, generation, payload length, SHA-256
_MIN_PAYLOAD_BYTES = 1
_MAX_PAYLOAD_BYTES = 256 * 1024


class TornContentError(AssertionError):
    """What a reader found is not one whole write."""


def content(writer: int, generation: int) -> bytes:
    """The bytes of ``writer``'s write number ``generation``: a pure function of both."""
    rng = random.Random(writer * 1_000_003 + generation)
    payload = rng.randbytes(rng.randint(_MIN_PAYLOAD_BYTES, _MAX_PAYLOAD_BYTES))
    digest = hashlib.sha256(payload).digest()
    return _HEADER.pack(writer, generation, len(payload), digest) + payload


def check(data: bytes) -> tuple[int, int]:
    """``(writer, generation)`` of a whole write; ``TornContentError`` for anything else."""
    if len(data) < _HEADER.size:
        raise TornContentError(f"{len(data)} bytes: shorter than a header")
    writer, generation, length, digest = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        raise TornContentError(f"writer {writer} generation {generation}: payload does not match")
    if data != content(writer, generation):
        raise TornContentError(f"writer {writer} generation {generation}: not what it wrote")
    return writer, generation


def write_generations(
    path: Path, writer: int, generations: int, written: Callable[[int], None]
) -> None:
    """Write generations 1..``generations`` of ``writer`` (forever for 0), calling
    ``written(generation)`` after each write returned."""
    generation = 1
    while generations == 0 or generation <= generations:
        replace_file(path, content(writer, generation))
        written(generation)
        generation += 1


def _stall_at_fsync(call: int) -> None:
    """Make the ``call``-th fsync from now on announce itself and never return."""
    real_fsync = os.fsync
    calls = [0]

    def fsync(fd: int) -> None:
        calls[0] += 1
        if calls[0] == call:
            print(STALLED, flush=True)
            threading.Event().wait()
        real_fsync(fd)

    os.fsync = fsync  # dataplane.files calls it through the module


def _announce(generation: int) -> None:
    print(generation, flush=True)


def main(argv: list[str]) -> None:
    path, writer, generations = Path(argv[0]), int(argv[1]), int(argv[2])
    if len(argv) > 3:
        write_generations(path, writer, 1, _announce)
        _stall_at_fsync(int(argv[3]))
        replace_file(path, content(writer, 2))
        return
    write_generations(path, writer, generations, _announce)


if __name__ == "__main__":
    main(sys.argv[1:])
