"""The one way settings read the environment: a missing required variable fails loudly."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from controlplane.core.private_files import private_file

T = TypeVar("T")
REQUIRED: Any = object()


@overload
def env(name: str, default: str = ...) -> str: ...
@overload
def env(name: str, default: T, cast: Callable[[str], T]) -> T: ...
@overload
def env(name: str, *, cast: Callable[[str], T]) -> T: ...


def env(name: str, default: Any = REQUIRED, cast: Callable[[str], Any] = str) -> Any:
    """``os.environ[name]`` converted by ``cast``; ``default`` when unset (no default:
    ImproperlyConfigured naming the variable)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        if default is REQUIRED:
            raise ImproperlyConfigured(f"environment variable {name} is required")
        return default
    try:
        return cast(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"environment variable {name}={raw!r}: {exc}") from exc


def as_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def as_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(url: str) -> dict[str, Any]:
    """A Django DATABASES entry from ``postgres://user:pass@host:port/name`` or
    ``sqlite:///absolute/path.db``. A SQLite file and the directories made for it are
    private (``0600``/``0700``), created so before SQLite opens it: it holds the
    desired state and the digests of service-account secrets."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        path = unquote(parts.path) or ":memory:"
        if path != ":memory:":
            _private_sqlite_file(Path(path))
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            # WAL: the demo's API server, worker and controller share one file.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    if parts.scheme in {"postgres", "postgresql"}:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    raise ImproperlyConfigured(f"unsupported database URL scheme {parts.scheme!r}")


def _private_sqlite_file(path: Path) -> None:
    """SQLite gives its ``-wal`` and ``-shm`` files the database file's mode when it
    makes them; ones left from before are narrowed here too."""
    private_file(path)
    for suffix in ("-wal", "-shm"):
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            private_file(companion)
