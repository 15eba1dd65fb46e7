"""Helpers of the Databus tests: an agent on an in-memory cluster, and a wait."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from databus.agent import Agent
from databus.config import parse_config
from databus.upstream import MemoryUpstream


def wait_until(check: Callable[[], Any], timeout_s: float = 10.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.01)


def config(version: int = 1, **streams: dict[str, Any]) -> Any:
    return parse_config({"streams": streams}, version=version)


@pytest.fixture
def cluster() -> MemoryUpstream:
    return MemoryUpstream({"acme.clicks": 3, "acme.clicks~ppe": 3, "acme.other": 2})


@pytest.fixture
def make_agent(tmp_path: Path, cluster: MemoryUpstream) -> Iterator[Callable[..., Agent]]:
    agents: list[Agent] = []

    def make(**streams: dict[str, Any]) -> Agent:
        agent = Agent(tmp_path / "agent", cluster)
        if streams:
            agent.apply(config(**streams), {})
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close(0)
