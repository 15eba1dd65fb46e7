"""Lanes end to end on the whole platform: the demo (``tests/support/demo.py``) runs the
control plane, its Celery worker with beat, two controllers and three local brokers with
authentication on; the tests act as the demo tenant's service account (a developer)
through the REST API and the SDK, over real sockets. One demo serves the module; each
test uses topics and lanes of its own."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dataplane.client import Consumer, Producer
from dataplane.client.auth import ClientCredentials
from tests.support.demo import Demo, running_demo

# The lanes GC runs every second here, so a short TTL is seen within seconds.
DEMO_ENV = {"MERIDIAN_LANES_GC_INTERVAL_S": "1"}
_names = itertools.count()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    data_dir: Path = tmp_path_factory.mktemp("lanes") / "demo"
    with running_demo(data_dir, records=10, env=DEMO_ENV, regions="east") as running:
        yield running


@pytest.fixture(autouse=True)
def _logs_on_failure(demo: Demo, request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        print(demo.logs()[-20000:])


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{int(time.time() * 1000) % 100000}"


def credentials(demo: Demo) -> ClientCredentials:
    return ClientCredentials(demo.token_url, demo.client_id, demo.client_secret)


def producer(demo: Demo, **kwargs: Any) -> Producer:
    return Producer(demo.bootstrap, acks="all", credentials=credentials(demo), **kwargs)


def consumer(demo: Demo, group: str, **kwargs: Any) -> Consumer:
    kwargs.setdefault("auto_offset_reset", "earliest")
    return Consumer(
        demo.bootstrap,
        group_id=f"demo.{group}",  # a tenant's group ids start with its slug
        credentials=credentials(demo),
        session_timeout_ms=6_000,
        heartbeat_interval_ms=1_000,
        **kwargs,
    )


def make_topic(demo: Demo, name: str, partitions: int = 3) -> str:
    status, body = demo.call(
        "POST", "/topics", {"name": name, "partitions": partitions, "replication_factor": 3}
    )
    assert status == 201, body
    full = f"demo.{name}"
    wait_until(lambda: demo.call("GET", f"/topics/{full}")[1]["status"] == "ready", 60, full)
    return full


def make_lane(demo: Demo, name: str, **fields: Any) -> dict[str, Any]:
    status, body = demo.call("POST", "/lanes", {"name": name, **fields})
    assert status == 201, body
    return body  # type: ignore[no-any-return]


def wait_until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)


def drain(c: Consumer, want: int, timeout_s: float = 60) -> list[Any]:
    """Poll until ``want`` records came (or the time is up); what came."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(c.poll(timeout_ms=300))
    return got


def quiet(c: Consumer, seconds: float) -> list[Any]:
    """Whatever else comes within ``seconds`` (proves nothing more is delivered)."""
    got: list[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got.extend(c.poll(timeout_ms=200))
    return got
