"""The agent: its streams under the configuration it was last given.

``apply(config, resolved)`` takes a configuration live. A new stream opens its spool and
starts its drain; a changed stream takes the new settings for its next write and its
next chunk (the chunk in flight finishes as journaled, see ``databus.drain``); a stream
no longer configured stops taking writes (404) but its drain goes on until its spool is
empty, to the topic it was last given (also after a restart: each stream keeps the
settings it was last drained under in ``stream.json``), and is then closed. Nothing is
restarted, so no record in flight is lost or sent twice.

The configuration in force is kept in ``<data dir>/config.json`` (private), so an agent
started while the control plane is unreachable works on the last one it had. One agent
holds a data directory at a time (``agent.lock``, an advisory lock).

Thread safety: ``apply`` and ``close`` are serialised; ``write`` may run on any thread.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from databus.config import ConfigError, DatabusConfig, parse_config
from databus.stream import Stream, WriteError, WriteRecord
from databus.upstream import Upstream
from dataplane.files import replace_file

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
LOCK_FILE = "agent.lock"
AGENT_ID_FILE = "agent-id"
DEFAULT_MAX_RECORD_BYTES = 1024 * 1024


class DataDirInUse(Exception):  # noqa: N818
    def __init__(self, path: Path) -> None:
        super().__init__(f"another agent holds {path}")


class Agent:
    def __init__(self, data_dir: Path, upstream: Upstream, config_name: str = "") -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock_fd = _lock(self.data_dir / LOCK_FILE)
        self.upstream = upstream
        self.config_name = config_name
        self.agent_id = _agent_id(self.data_dir / AGENT_ID_FILE)
        self.started_at = time.time()
        self.config: DatabusConfig | None = None
        self.resolved: dict[str, Any] = {}
        self.streams: dict[str, Stream] = {}
        self._apply_lock = threading.Lock()
        self.applied_at = 0.0
        self._load_saved()
        with self._apply_lock:
            self._reopen_leftovers()

    # -- configuration --------------------------------------------------------------------
    def _reopen_leftovers(self) -> None:
        """Streams no longer configured whose spools still hold records (the agent
        stopped before they drained): drain them under their last settings."""
        for directory in sorted((self.data_dir / "streams").glob("*/")):
            name = directory.name
            if name in self.streams:
                continue
            stream = Stream.reopen(name, directory, self.upstream)
            if stream is not None:
                log.info("stream %s left the configuration: draining what it holds", name)
                self.streams[name] = stream

    def _close_retired(self) -> None:
        for name, stream in list(self.streams.items()):
            if not stream.accepting and stream.close_if_drained():
                del self.streams[name]

    def _load_saved(self) -> None:
        path = self.data_dir / CONFIG_FILE
        try:
            saved = json.loads(path.read_bytes())
            config = parse_config(saved["document"], version=int(saved["version"]))
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, ConfigError) as err:
            log.error("ignoring the saved configuration %s: %s", path, err)
            return
        self.apply(config, saved.get("resolved", {}), save=False)

    def apply(self, config: DatabusConfig, resolved: dict[str, Any], *, save: bool = True) -> None:
        """Take ``config`` live (see the module docstring); ``resolved`` gives each
        stream's ``max_record_bytes`` as the control plane resolved it."""
        with self._apply_lock:
            self._close_retired()
            for name, stream_config in config.streams.items():
                limit = _max_record_bytes(resolved.get(name))
                current = self.streams.get(name)
                if current is None:
                    directory = self.data_dir / "streams" / name
                    self.streams[name] = Stream(stream_config, limit, directory, self.upstream)
                else:
                    current.reconfigure(stream_config, limit)
            for name, stream in self.streams.items():
                if name not in config.streams:
                    stream.retire()
            self.config = config
            self.resolved = resolved
            self.applied_at = time.time()
            if save:
                document = {
                    "version": config.version,
                    "document": config.to_json(),
                    "resolved": resolved,
                }
                replace_file(
                    self.data_dir / CONFIG_FILE, json.dumps(document).encode(), private=True
                )
        log.info(
            "configuration version %s applied: streams %s", config.version, sorted(config.streams)
        )

    @property
    def version(self) -> int:
        return self.config.version if self.config is not None else 0

    # -- writing --------------------------------------------------------------------------
    def write(
        self, stream: str, records: list[WriteRecord], lane: str | None
    ) -> tuple[int, str, int]:
        """(records accepted, delivery mode, configuration version); ``WriteError``."""
        if self.config is None:
            raise WriteError("unavailable", "no configuration yet", retry_after_s=1.0)
        target = self.streams.get(stream)
        if target is None or not target.accepting:
            raise WriteError("unknown_stream", f"no stream {stream!r} in the configuration")
        accepted = target.write(records, lane)
        return accepted, target.config.delivery, self.version

    # -- state ----------------------------------------------------------------------------
    def stats(self) -> dict[str, dict[str, Any]]:
        with self._apply_lock:
            self._close_retired()
        now = time.time_ns() // 1_000_000
        return {name: s.snapshot(now) for name, s in sorted(self.streams.items())}

    def health(self) -> dict[str, Any]:
        streams = {}
        healthy = self.config is not None
        for name, stream in sorted(self.streams.items()):
            stats = stream.drainer.stats
            stuck = time.time() - stats.last_error_at < 30 and stream.spool.depth_records() > 0
            streams[name] = {
                "accepting": stream.accepting,
                "topic": stream.config.topic,
                "lane": stream.config.lane,
                "delivery": stream.config.delivery,
                "spool_records": stream.spool.depth_records(),
                "last_error": stats.last_error if stuck else "",
            }
        return {
            "status": "ok" if healthy else "no-config",
            "agent_id": self.agent_id,
            "config": self.config_name,
            "version": self.version,
            "streams": streams,
        }

    def close(self, drain_timeout_s: float = 5.0) -> None:
        """Stop taking writes, drain for up to ``drain_timeout_s``, then stop."""
        with self._apply_lock:
            if self._lock_fd < 0:
                return
            for stream in self.streams.values():
                stream.accepting = False
            deadline = time.monotonic() + drain_timeout_s
            for stream in self.streams.values():
                stream.close(max(0.0, deadline - time.monotonic()))
            self.upstream.close()
            os.close(self._lock_fd)
            self._lock_fd = -1


def _max_record_bytes(resolved: object) -> int:
    if isinstance(resolved, dict):
        value = resolved.get("max_record_bytes")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return DEFAULT_MAX_RECORD_BYTES


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirInUse(path.parent) from None
    return fd


def _agent_id(path: Path) -> str:
    try:
        return str(uuid.UUID(path.read_text().strip()))
    except (FileNotFoundError, ValueError):
        agent_id = str(uuid.uuid4())
        replace_file(path, agent_id.encode(), private=True)
        return agent_id
