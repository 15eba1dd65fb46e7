"""Fixtures for group coordinator tests: an in-process coordinator behind gRPC."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from .support import CoordinatorServer, ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., CoordinatorServer]]:
    """Factory starting coordinator servers (data under tmp_path); all stopped at the end."""
    started: list[CoordinatorServer] = []

    def factory(data_dir: Path | None = None, **kwargs: Any) -> CoordinatorServer:
        server = CoordinatorServer(data_dir or tmp_path / "data", **kwargs).start()
        started.append(server)
        return server

    yield factory
    for server in reversed(started):
        server.stop()


@pytest.fixture
def server(make_server: Callable[..., CoordinatorServer], clock: ManualClock) -> CoordinatorServer:
    return make_server(clock=clock)


@pytest.fixture
def channel(server: CoordinatorServer) -> Iterator[grpc.Channel]:
    with server.channel() as channel:
        yield channel
