"""Files and directories only their owner can read: keys, secrets and the data they sit
in. Modes are set explicitly after creating, so a permissive umask (``022``, ``000``)
never widens them and a restrictive one never makes them unusable to their owner.

Directories are ``0700`` and files ``0600`` when these functions create them. An
existing directory is left as it is (it may be shared on purpose, like ``/tmp``); an
existing file handed to ``private_file`` or read by ``read_or_create_private`` is
narrowed to ``0600``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """``path`` as a directory; each missing component, the parents included, is made
    ``0700`` (``mkdir -p`` would leave the parents to the umask)."""
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # another process made it, with these same modes
        os.chmod(directory, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """``path`` as a ``0600`` file: created empty in a private directory when missing,
    narrowed when it exists (it may predate this rule)."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return path


def write_private(path: Path, data: bytes) -> None:
    """``data`` in ``path`` (``0600``, in a private directory), replaced atomically: a
    reader sees the old content or the new, never a part."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write_new(tmp, data)
    os.replace(tmp, path)


def read_or_create_private(path: Path, make: Callable[[], bytes]) -> bytes:
    """The content of ``path``; when it is missing, ``make()`` stored there (``0600``,
    in a private directory) by whichever process gets there first: the file appears
    whole (published with a hard link), and every process returns the same bytes."""
    with contextlib.suppress(FileNotFoundError):
        return _read_narrowed(path)
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    _write_new(tmp, make())
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process published first: its content counts
    finally:
        tmp.unlink()
    return path.read_bytes()


def _read_narrowed(path: Path) -> bytes:
    """An existing secret's content, its mode narrowed to ``0600`` first (it may predate
    this rule, or come from an operator's ``cp``)."""
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_mode & 0o077:
            os.fchmod(file.fileno(), FILE_MODE)
        return file.read()


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), FILE_MODE)
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
