"""Small files written whole: checkpoints, snapshots, pushed metadata, ready files, secrets.

``replace_file(path, data)`` is how every part of the project writes such a file. Its
guarantee:

- **Whole or nothing.** At every moment, a process killed in the middle of the write
  included, a reader of ``path`` finds the old content whole or the new content whole:
  never a mix, a prefix or an empty file.
- **Durable.** Once it returns, ``path`` holds ``data`` through a crash or a power loss:
  the data and the directory entry are both fsynced.
- **Concurrent writers are safe.** Writers of one path (threads or processes) never
  share a temporary file, so every reader sees one writer's content whole; the last
  rename wins.

How: the data goes to a new temporary file in the same directory,
``.<name>.<random hex>.tmp``, created exclusively (``O_EXCL``) so no two writers share
one; it is fsynced, renamed over ``path`` (atomic within a file system) and the directory
is fsynced, so the rename itself survives a power loss. A failed write removes its
temporary file; a killed one leaves it behind, and partition directories remove
``*.tmp`` leftovers when they load (``dataplane.storage.recovery``).

``create_file(path, data)`` is the same write for a file that must be written once: it
publishes with a hard link instead of a rename, so of racing creators exactly one wins
and the others learn that it was not them.

``private=True`` makes the file ``0600`` whatever the umask (keys, secrets); otherwise it
is ``0644`` less the umask, as ``open`` makes files. Callers that need a private
directory too make it first (``controlplane.core.private_files``).

This module imports nothing of the project: storage, the broker and the control plane
all stand on it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

PUBLIC_MODE = 0o644
PRIVATE_MODE = 0o600
TEMPORARY_SUFFIX = ".tmp"
_RANDOM_BYTES = 8

StrPath = str | os.PathLike[str]


def replace_file(path: StrPath, data: bytes, *, private: bool = False) -> None:
    """``path`` holds ``data``, written whole and durably (see the module docstring)."""
    target = Path(path)
    temporary = _write_temporary(target, data, private=private)
    try:
        os.replace(temporary, target)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


def create_file(path: StrPath, data: bytes, *, private: bool = False) -> bool:
    """Whether ``path`` was created holding ``data``, whole and durably; False when
    ``path`` already existed (it is left as it was)."""
    target = Path(path)
    temporary = _write_temporary(target, data, private=private)
    try:
        os.link(temporary, target)
    except FileExistsError:
        return False
    finally:
        temporary.unlink(missing_ok=True)  # never hides the link's own error
    fsync_directory(target.parent)
    return True


def fsync_directory(directory: StrPath) -> None:
    """Make the names created, renamed or removed in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temporary(target: Path, data: bytes, *, private: bool) -> Path:
    """A new, fsynced file next to ``target`` holding ``data``; removed on failure."""
    fd, temporary = _create_temporary(target, PRIVATE_MODE if private else PUBLIC_MODE)
    try:
        with open(fd, "wb") as file:
            if private:
                # Set explicitly: the umask can only narrow the creation mode, and a
                # restrictive one (0o277) would lock the owner out of its own secret.
                os.fchmod(fd, PRIVATE_MODE)
            file.write(data)
            file.flush()
            os.fsync(fd)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


def _create_temporary(target: Path, mode: int) -> tuple[int, Path]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    while True:
        name = f".{target.name}.{secrets.token_hex(_RANDOM_BYTES)}{TEMPORARY_SUFFIX}"
        temporary = target.with_name(name)
        try:
            return os.open(temporary, flags, mode), temporary
        except FileExistsError:
            continue  # 64 random bits met another writer's: draw again
