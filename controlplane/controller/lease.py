"""Leases: which controller process of a region is the active one.

A ``Lease`` is held by at most one process at a time and is lost when that process dies,
so a standby retrying ``acquire`` takes over without any timeout to wait out:

- ``PostgresAdvisoryLease``: a session-level ``pg_try_advisory_lock(key)`` on a connection
  of its own (``key`` derived from the region name). The lock lives exactly as long as
  the session: when the holder dies or its connection breaks, Postgres releases it.
  ``held()`` proves the session is still alive with a round trip.
- ``FileLease`` (SQLite, the embedded demo only): an exclusive ``fcntl.flock`` on a file
  under ``settings.DATA_DIR``, released by the kernel when the holder dies.

``lease_for(region_name)`` picks by the database engine. Thread safety: one caller.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from pathlib import Path
from typing import IO, Any, Protocol

import psycopg
from django.conf import settings

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_MS = 5000


class Lease(Protocol):
    def acquire(self) -> bool:
        """Try once, without waiting; True when this process now holds the lease."""
        ...

    def held(self) -> bool:
        """Whether the lease is still this process's (False once it was lost)."""
        ...

    def release(self) -> None:
        """Give the lease up (idempotent)."""
        ...


def lock_key(region_name: str) -> int:
    """The region's advisory-lock key: a signed 64-bit integer, stable across processes."""
    digest = hashlib.blake2b(f"meridian.controller:{region_name}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


class PostgresAdvisoryLease:
    """See the module docstring. ``params`` are a Django ``DATABASES`` entry."""

    def __init__(self, region_name: str, params: dict[str, Any]) -> None:
        self.key = lock_key(region_name)
        self.params = params
        self._conn: psycopg.Connection[Any] | None = None
        self._held = False

    def acquire(self) -> bool:
        if self._held:
            return self.held()
        try:
            conn = self._conn = self._conn or self._connect()
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", [self.key]).fetchone()
        except psycopg.Error as exc:
            log.warning("cannot ask Postgres for the controller lock: %s", exc)
            self._drop()
            return False
        self._held = bool(row and row[0])
        return self._held

    def held(self) -> bool:
        if not self._held or self._conn is None:
            return False
        try:
            self._conn.execute("SELECT 1")
        except psycopg.Error as exc:
            log.warning("lost the controller lock's session: %s", exc)
            self._drop()
            return False
        return True

    def release(self) -> None:
        if self._conn is not None and self._held:
            try:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", [self.key])
            except psycopg.Error as exc:
                log.info("unlocking failed (the session ends anyway): %s", exc)
        self._drop()

    def _connect(self) -> psycopg.Connection[Any]:
        p = self.params
        return psycopg.connect(
            host=p.get("HOST") or None,
            port=p.get("PORT") or None,
            user=p.get("USER") or None,
            password=p.get("PASSWORD") or None,
            dbname=p["NAME"],
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name="meridian-controller",
            options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            # A vanished peer is noticed within seconds on both ends.
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=2,
        )

    def _drop(self) -> None:
        self._held = False
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                log.debug("closing the lease connection failed", exc_info=True)
            self._conn = None


class FileLease:
    """See the module docstring: an exclusive ``flock`` on ``path``."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._file: IO[bytes] | None = None

    def acquire(self) -> bool:
        if self._file is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = self.path.open("ab")
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            return False
        self._file = file
        return True

    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor releases the lock
            self._file = None


def lease_for(region_name: str) -> Lease:
    """The lease that fits the configured database (Postgres, else a file lock)."""
    params = settings.DATABASES["default"]
    if params["ENGINE"] == "django.db.backends.postgresql":
        return PostgresAdvisoryLease(region_name, params)
    path = Path(settings.DATA_DIR).resolve() / f"controller-{region_name}.lock"
    return FileLease(os.fspath(path))
