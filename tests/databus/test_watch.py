"""Following the control plane's watch (with a scripted control plane): a new version is
applied, a document the schema refuses is not, and a configuration deleted and made
again (its version back at 1) is noticed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from databus.agent import Agent
from databus.upstream import MemoryUpstream
from databus.watch import ConfigWatcher
from tests.databus.conftest import wait_until


class ScriptedControlPlane:
    def __init__(self, answers: list[tuple[int, Any]]) -> None:
        self.answers = answers
        self.asked: list[dict[str, str]] = []
        self.lock = threading.Lock()

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        headers: Any = None,
        timeout_s: float = 10,
    ) -> Any:
        with self.lock:
            self.asked.append(dict(headers or {}))
            status, answer = self.answers.pop(0) if self.answers else (304, None)
        return status, {}, answer


def served(version: int, topic: str) -> dict[str, Any]:
    return {"version": version, "document": {"streams": {"s": {"topic": topic}}}, "resolved": {}}


def test_versions_refusals_and_a_recreated_configuration(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("databus.watch.REFUSED_PAUSE_S", 0.05)
    agent = make_agent()
    cp = ScriptedControlPlane(
        [
            (200, served(1, "acme.clicks")),
            (
                200,
                {
                    "version": 2,
                    "document": {"streams": {"s": {"topic": "acme.clicks", "linger_ms": -1}}},
                },
            ),
            (404, {"error": {"code": "not_found"}}),
            (200, served(1, "acme.other")),  # made again: version 1, another document
            (200, {**served(1, "acme.other"), "resolved": {"s": {"max_record_bytes": 777}}}),
        ]
    )
    watcher = ConfigWatcher(agent, cp, "web")  # type: ignore[arg-type]
    watcher.start()
    try:
        wait_until(
            lambda: agent.config is not None and agent.streams["s"].config.topic == "acme.other", 30
        )
    finally:
        watcher.stop()
    assert cp.asked[0] == {}  # nothing in force yet: no version named
    assert cp.asked[1] == {"If-None-Match": '"1"'}
    assert cp.asked[3] == {}  # after the 404: no version named, so the new one comes at once
    assert agent.version == 1
    assert agent.streams["s"].config.topic == "acme.other"  # and its topic's new limit
