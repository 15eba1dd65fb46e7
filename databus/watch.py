"""Following the agent's configuration on the control plane, and reporting to it.

``ConfigWatcher`` long-polls ``GET /api/v1/databus-configs/{name}/watch?wait=25`` with
``If-None-Match: "<version in force>"``: the control plane answers 304 when nothing
changed within the wait and 200 with the configuration as soon as its version differs.
A document the agent cannot parse (``databus.config.parse_config``) is never applied:
the agent keeps the configuration it had and says why in its log and health. When the
control plane is unreachable the agent keeps working on the configuration in force (or
the one saved in its data directory) and tries again with backoff.

``Heartbeat`` posts the agent's id, configuration and per-stream figures to ``POST
/api/v1/databus-agents/heartbeat`` every ``interval_s``, so the console shows which
agents run which version.

Both authenticate with the agent's service account (``dataplane.client.auth``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from databus.agent import Agent
from databus.config import ConfigError, parse_config
from dataplane.client import rest
from dataplane.client.auth import TokenSource
from dataplane.errors import MeridianError

log = logging.getLogger(__name__)

WAIT_S = 25
RECHECK_EVERY = 20  # watches (about 8 minutes when nothing changes)
REFUSED_PAUSE_S = 5.0  # after a configuration the agent could not take
# The per-stream figures a heartbeat reports (the control plane takes exactly these).
HEARTBEAT_STATS = (
    "records_in",
    "records_out",
    "bytes_in",
    "bytes_out",
    "spool_records",
    "spool_bytes",
    "spool_age_s",
    "dropped",
    "rejected",
)
BACKOFF_MAX_S = 30.0


class ControlPlane:
    """JSON calls to the control plane's REST API with the agent's token
    (``dataplane.client.rest``): every answer comes back as (status, headers, body), the
    body decoded JSON, or its text; an unreachable API raises ``OSError``."""

    def __init__(self, api_url: str, tokens: TokenSource | None) -> None:
        self.api_url = api_url.rstrip("/")
        self.tokens = tokens

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        headers: dict[str, str] | None = None,
        timeout_s: float = 10,
    ) -> tuple[int, dict[str, str], Any]:
        answer = rest.request(
            method,
            self.api_url + path,
            body=body,
            tokens=self.tokens,
            headers=headers,
            timeout_s=timeout_s,
        )
        return answer.status, answer.headers, answer.body


class ConfigWatcher:
    def __init__(self, agent: Agent, control_plane: ControlPlane, config_name: str) -> None:
        self.agent = agent
        self.cp = control_plane
        self.name = config_name
        self.last_error = ""
        self.last_contact = 0.0
        self._lost = False  # the configuration answered 404: ask again without a version
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="databus-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        failures = 0
        path = (
            f"/api/v1/databus-configs/{urllib.parse.quote(self.name, safe='')}/watch?wait={WAIT_S}"
        )
        polls = 0
        while not self._stop.is_set():
            polls += 1
            # A configuration deleted and made again starts again at version 1: after a
            # 404, and every RECHECK_EVERY polls, ask without a version and compare.
            known = self.agent.config is not None and not self._lost and polls % RECHECK_EVERY
            headers = {"If-None-Match": f'"{self.agent.version}"'} if known else {}
            try:
                status, _, body = self.cp.call("GET", path, headers=headers, timeout_s=WAIT_S + 10)
            except (OSError, MeridianError, ValueError) as err:
                failures += 1
                self._failed(f"control plane unreachable: {err}", failures)
                continue
            self.last_contact = time.time()
            if status == 304:
                failures = 0
            elif status == 200:
                failures = 0
                self._lost = False
                self._take(body)
            else:
                self._lost = self._lost or status == 404
                failures += 1
                self._failed(f"control plane answered {status}: {body}", failures)

    def _take(self, body: Any) -> None:
        try:
            version = int(body["version"])
            config = parse_config(body["document"], version=version)
            resolved = body.get("resolved") or {}
            if not isinstance(resolved, dict):
                raise ValueError("resolved must be an object")
        except (ConfigError, KeyError, TypeError, ValueError) as err:
            self.last_error = f"configuration not applied: {err}"
            log.error("%s", self.last_error)
            self._stop.wait(REFUSED_PAUSE_S)
            return
        current = self.agent.config
        changed = current is None or config.version != current.version or config != current
        if changed or resolved != self.agent.resolved:  # e.g. a topic's size limit moved
            try:
                self.agent.apply(config, resolved)
            except Exception as err:
                self.last_error = f"configuration {version} not applied: {err}"
                log.exception("%s", self.last_error)
                self._stop.wait(REFUSED_PAUSE_S)
                return
        self.last_error = ""

    def _failed(self, message: str, failures: int) -> None:
        self.last_error = message
        log.warning("%s (keeping configuration version %s)", message, self.agent.version)
        self._stop.wait(
            min(BACKOFF_MAX_S, 0.5 * 2 ** min(failures, 6)) * (0.5 + random.random() / 2)
        )


class Heartbeat:
    def __init__(self, agent: Agent, control_plane: ControlPlane, interval_s: float = 10) -> None:
        self.agent = agent
        self.cp = control_plane
        self.interval_s = interval_s
        self.latest_version: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="databus-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def beat(self) -> None:
        body = {
            "agent_id": self.agent.agent_id,
            "config": self.agent.config_name,
            "version": self.agent.version,
            "hostname": socket.gethostname()[:200],
            "pid": os.getpid(),
            "started_at": datetime.fromtimestamp(self.agent.started_at, UTC).isoformat(),
            "stats": {
                name: {key: stats[key] for key in HEARTBEAT_STATS}
                for name, stats in self.agent.stats().items()
            },
        }
        status, _, answer = self.cp.call("POST", "/api/v1/databus-agents/heartbeat", body)
        if status == 200 and isinstance(answer, dict):
            self.latest_version = answer.get("latest_version")
        else:
            log.info("heartbeat answered %s: %s", status, answer)

    def _run(self) -> None:
        while True:
            try:
                self.beat()
            except Exception as err:
                log.info("heartbeat failed: %s", err)
            if self._stop.wait(self.interval_s * (0.9 + random.random() / 5)):
                return


class FileWatcher:
    """``--config-file``: the document in a local file, applied again whenever the file
    changes (checked every ``interval_s``); its version counts the changes seen, from 1.
    A document that does not parse is not applied (the agent keeps the one it has)."""

    def __init__(self, agent: Agent, path: Path, interval_s: float = 1.0) -> None:
        self.agent = agent
        self.path = path
        self.interval_s = interval_s
        self.last_error = ""
        self._seen: tuple[int, int] | None = None
        self._version = agent.version
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="databus-file", daemon=True)

    def load(self) -> None:
        """Apply the file now if it changed; raises ``ConfigError``/``OSError``/
        ``ValueError`` when it cannot be read or parsed."""
        stat = self.path.stat()
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return
        document = json.loads(self.path.read_bytes())
        config = parse_config(document, version=self._version + 1)
        if self.agent.config is None or config.to_json() != self.agent.config.to_json():
            self.agent.apply(config, {})
            self._version += 1
        self._seen = seen

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.load()
                self.last_error = ""
            except Exception as err:
                if str(err) != self.last_error:
                    log.error("%s: not applied: %s", self.path, err)
                self.last_error = str(err)
