"""The object store of tiered storage: immutable objects under a root, through fsspec.

``ObjectStore.open(uri, options)`` takes what a cluster is configured with: a local folder
(a path or ``file://``), ``s3://bucket/prefix`` (s3fs), or any other fsspec URI
(``gs://``, ``hdfs://``, ``memory://`` in tests); ``options`` are the filesystem's own
keyword arguments (endpoint, credentials), read from a private file by the broker.

Keys are ``/``-separated paths below the root (``layout.py`` names them). Every object is
written once and never changed, with two ways to write:

- ``put_stream`` / ``put_bytes``: whole or not at all (a local folder writes a temporary
  file, fsyncs it and renames it; an object store's PUT is atomic), so a writer killed
  half-way never leaves a partial object under the key;
- ``create``: the same, but only if the key is free, atomically (a hard link locally,
  ``If-None-Match: *`` on S3): of racing creators exactly one wins. Manifest versions are
  committed this way, which is what makes a manifest a compare-and-set register.

Failures are typed: ``RemoteObjectMissingError`` for a key that is not there,
``RemoteStoreUnavailableError`` for anything else the store answered (or did not). The
store never retries: its callers decide (the uploader backs off, a fetch answers a
retriable error).

A local folder holds tenants' records, so it is private: objects are ``0600`` and the
folders made for them ``0700``, whatever the umask (an object store's own access rules
govern the rest).

Thread safety: any number of threads may call any method.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import crc32c
import fsspec
from fsspec.implementations.local import LocalFileSystem

from dataplane.files import PRIVATE_MODE, create_file, fsync_directory, replace_file

T = TypeVar("T")

# An S3 endpoint that does not answer should fail a call in seconds, not minutes: the
# uploader retries on its own schedule, and a fetch should answer while the client waits.
# s3fs itself retries a failed call 5 times: once is enough, and a retried exclusive create
# whose first try succeeded would read as lost.
_S3_DEFAULTS: dict[str, Any] = {
    "retries": 1,
    "config_kwargs": {"connect_timeout": 3, "read_timeout": 10, "retries": {"max_attempts": 1}},
}
_COPY_CHUNK = 4 * 1024 * 1024


class RemoteStoreError(Exception):
    """Base of the object store's failures."""


class RemoteStoreUnavailableError(RemoteStoreError):
    """The store did not do what was asked (unreachable, refused, timed out)."""


class RemoteObjectMissingError(RemoteStoreError):
    """No object under the key."""

    def __init__(self, key: str) -> None:
        super().__init__(f"no object {key!r} in the remote store")
        self.key = key


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str  # relative to the store's root
    size: int
    modified_s: float  # when it was written (seconds since the epoch); 0 if unknown


class ObjectStore:
    """Immutable objects under ``root`` of an fsspec filesystem (see the module docstring)."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, uri: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.uri = uri
        self.local = isinstance(fs, LocalFileSystem)

    @classmethod
    def open(cls, uri: str, options: dict[str, Any] | None = None) -> ObjectStore:
        """The store at ``uri`` with the filesystem ``options``; a local folder is made."""
        if not uri:
            raise ValueError("an object store needs a URI")
        protocol = uri.split("://", 1)[0] if "://" in uri else "file"
        kwargs = dict(options or {})
        if protocol in ("s3", "s3a"):
            kwargs = {**_S3_DEFAULTS, **kwargs}
            kwargs["config_kwargs"] = {
                **_S3_DEFAULTS["config_kwargs"],
                **dict(kwargs.get("config_kwargs") or {}),
            }
        # s3fs takes its retry count as an attribute, not an argument (which it would
        # hand on to its session, which refuses it).
        retries = kwargs.pop("retries", None)
        fs, root = fsspec.core.url_to_fs(uri, **kwargs)
        if retries is not None:
            fs.retries = retries
        store = cls(fs, root, uri)
        if store.local:
            _private_folder(Path(store.root))
        return store

    @classmethod
    def from_options_file(cls, uri: str, options_file: str | None) -> ObjectStore:
        """``open`` with the options of a JSON file (a private file holding credentials)."""
        options: dict[str, Any] = {}
        if options_file:
            loaded = json.loads(Path(options_file).read_text())
            if not isinstance(loaded, dict):
                raise ValueError(f"{options_file}: the store's options must be a JSON object")
            options = loaded
        return cls.open(uri, options)

    def path(self, key: str) -> str:
        return f"{self.root}/{key}"

    # -- writing ------------------------------------------------------------------------
    def put_stream(self, key: str, source: BinaryIO, size: int) -> tuple[int, int]:
        """Upload ``size`` bytes read from ``source`` under ``key``, whole or not at all;
        (bytes written, their CRC-32C). A short source is an error (nothing is listed)."""
        reader = _CrcReader(source, size)
        if self.local:
            self._call(key, lambda: self._copy_local(reader, Path(self.path(key))))
        else:

            def upload() -> None:
                # Not committed until whole: a failed copy discards its parts rather than
                # leaving a short object under the key.
                out = self.fs.open(self.path(key), "wb", autocommit=False)
                try:
                    shutil.copyfileobj(reader, out, _COPY_CHUNK)
                    reader.check_done()
                    out.close()
                    out.commit()
                except BaseException:
                    with contextlib.suppress(Exception):
                        out.discard()
                    raise

            self._call(key, upload)
        return reader.read_bytes, reader.crc

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key``, whole or not at all."""
        if self.local:
            target = Path(self.path(key))

            def write() -> None:
                _private_folder(target.parent)
                replace_file(target, data, private=True)

            self._call(key, write)
        else:
            self._call(key, lambda: self.fs.pipe_file(self.path(key), data))

    def create(self, key: str, data: bytes) -> bool:
        """Write ``data`` under ``key`` if no object is there; False if one was."""
        if self.local:
            target = Path(self.path(key))

            def make() -> bool:
                _private_folder(target.parent)
                return create_file(target, data, private=True)

            return self._call(key, make)
        try:
            self._call(key, lambda: self.fs.pipe_file(self.path(key), data, mode="create"))
        except RemoteStoreUnavailableError as exc:
            if isinstance(exc.__cause__, FileExistsError):
                return False
            raise
        return True

    # -- reading ------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self._call(key, lambda: bytes(self.fs.cat_file(self.path(key))))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object (fewer at its end)."""
        return self._call(
            key, lambda: bytes(self.fs.cat_file(self.path(key), start=start, end=end))
        )

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with the folder ``prefix`` (recursively), fresh
        from the store (never a cached listing)."""
        base = self.path(prefix.rstrip("/"))

        def find() -> list[ObjectInfo]:
            self.fs.invalidate_cache(base)
            try:
                found = self.fs.find(base, detail=True)
            except FileNotFoundError:
                return []
            return [self._info(path, info) for path, info in found.items()]

        return sorted(self._call(prefix, find), key=lambda info: info.key)

    def children(self, prefix: str) -> builtins.list[str]:
        """The names directly below the folder ``prefix`` (folders and objects)."""
        base = self.path(prefix.rstrip("/")) if prefix else self.root

        def ls() -> builtins.list[str]:
            self.fs.invalidate_cache(base)
            try:
                names = self.fs.ls(base, detail=False)
            except FileNotFoundError:
                return []
            return sorted({str(name).rstrip("/").rsplit("/", 1)[-1] for name in names})

        return self._call(prefix, ls)

    def exists(self, key: str) -> bool:
        path = self.path(key)

        def check() -> bool:
            self.fs.invalidate_cache(path.rsplit("/", 1)[0])
            return bool(self.fs.exists(path))

        return self._call(key, check)

    # -- deleting -----------------------------------------------------------------------
    def delete(self, keys: builtins.list[str]) -> None:
        """Remove the objects (a missing one is no error)."""
        if not keys:
            return
        paths = [self.path(key) for key in keys]

        def remove() -> None:
            for chunk in _chunks(paths, 500):
                try:
                    self.fs.rm(chunk)
                except FileNotFoundError:
                    for path in chunk:
                        with contextlib.suppress(FileNotFoundError):
                            self.fs.rm_file(path)

        self._call(keys[0], remove)
        if self.local:
            self._prune_folders({os.path.dirname(path) for path in paths})

    def _prune_folders(self, folders: set[str]) -> None:
        """Remove the folders a local delete emptied, up to the root: an object store
        has no folders, and listings must not show empty ones."""
        root = os.path.abspath(self.root)
        for folder in sorted(folders, key=len, reverse=True):
            current = os.path.abspath(folder)
            while current.startswith(root + os.sep):
                try:
                    os.rmdir(current)
                except OSError:
                    break  # not empty (or gone): its parents are not empty either
                current = os.path.dirname(current)

    # -- helpers ------------------------------------------------------------------------
    def _call(self, key: str, action: Callable[[], T]) -> T:
        try:
            return action()
        except FileNotFoundError as exc:
            raise RemoteObjectMissingError(key) from exc
        except RemoteStoreError:
            raise
        except Exception as exc:  # every failure of a store is one of its two kinds
            raise RemoteStoreUnavailableError(f"{self.uri}: {key}: {exc}") from exc

    def _info(self, path: str, info: dict[str, Any]) -> ObjectInfo:
        key = path[len(self.root) + 1 :] if path.startswith(self.root + "/") else path
        modified = info.get("mtime") or info.get("LastModified") or 0
        if hasattr(modified, "timestamp"):
            modified = modified.timestamp()
        return ObjectInfo(key, int(info.get("size") or 0), float(modified))

    @staticmethod
    def _copy_local(source: _CrcReader, target: Path) -> None:
        _private_folder(target.parent)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
            with open(fd, "wb") as dst:
                os.fchmod(fd, PRIVATE_MODE)  # whatever the umask
                shutil.copyfileobj(source, dst, _COPY_CHUNK)
                source.check_done()
                dst.flush()
                os.fsync(dst.fileno())
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)
        fsync_directory(target.parent)


class _CrcReader:
    """Reads at most ``size`` bytes of ``source``, keeping their CRC-32C."""

    def __init__(self, source: BinaryIO, size: int) -> None:
        self.source = source
        self.size = size
        self.read_bytes = 0
        self.crc = 0

    def read(self, n: int = -1) -> bytes:
        left = self.size - self.read_bytes
        data = self.source.read(left if n < 0 else min(n, left)) if left > 0 else b""
        self.read_bytes += len(data)
        self.crc = crc32c.crc32c(data, self.crc)
        return data

    def check_done(self) -> None:
        if self.read_bytes != self.size:
            raise OSError(f"the source ended after {self.read_bytes} of {self.size} bytes")


def _private_folder(folder: Path) -> None:
    """``folder`` and the parents made for it, ``0700`` (an existing one is left as it
    is: the root may be a folder an operator made)."""
    if folder.is_dir():
        return
    _private_folder(folder.parent)
    with contextlib.suppress(FileExistsError):  # made by another writer meanwhile
        folder.mkdir(mode=0o700)
        os.chmod(folder, 0o700)


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
