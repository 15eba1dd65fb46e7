"""Fixtures for SDK tests against real brokers.

``shared_broker`` is one broker process for a whole test module (tests use topics of
their own, from ``topic``), so a module pays for one start; tests that kill or restart a
broker use the root ``broker`` and ``cluster`` fixtures instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from dataplane.client import Admin
from tests.support.brokers import BrokerProcess, stop_all

_names = itertools.count()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("shared") / "broker-1", broker_id=1)
    try:
        yield process.start()
    finally:
        stop_all([process])


@pytest.fixture(scope="module")
def admin(shared_broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(shared_broker.address) as client:
        yield client


@pytest.fixture
def topic(admin: Admin) -> Callable[..., str]:
    """``topic(partitions=1, **config)`` creates a fresh topic on the shared broker."""

    def make(partitions: int = 1, **config: object) -> str:
        name = f"test.t{next(_names)}"
        admin.create_topic(name, partitions, {"durability": "never", **config})
        return name

    return make
