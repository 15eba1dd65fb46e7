"""Two regions of real brokers (``east``, ``west``: one broker each, auth off) and the
workers a test starts, all torn down at the end; logs printed when a test failed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.mirror import Region, WorkerProcess


@pytest.fixture
def regions(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Region, Region]]:
    east = Region.start(tmp_path / "east")
    try:
        west = Region.start(tmp_path / "west")
    except BaseException:
        east.stop()
        raise
    try:
        yield east, west
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            for broker in [*east.brokers, *west.brokers]:
                print(f"===== {broker!r} =====\n{broker.log_text()[-6000:]}")
        east.stop()
        west.stop()


@pytest.fixture
def workers(request: pytest.FixtureRequest) -> Iterator[list[WorkerProcess]]:
    """Workers a test appends here are killed at teardown."""
    started: list[WorkerProcess] = []
    try:
        yield started
    finally:
        report = getattr(request.node, "report_call", None)
        for worker in started:
            worker.kill()
            if report is not None and report.failed:
                print(f"===== worker {worker.directory} =====\n{worker.log_text()[-8000:]}")
