"""Fixtures shared by every test folder.

``broker``: one broker process (id 1) in a fresh data directory.
``cluster``: three broker processes (ids 1-3) that know each other and already agree on
the cluster view. Both are ``tests.support.brokers.BrokerProcess`` objects, killed at
teardown whatever the test did; when a test fails, their logs are printed.
``s3_store_uri``: a fresh bucket on the session's S3 endpoint (``tests.support.s3``), as
``(uri, options)`` for ``dataplane.tiered.store.ObjectStore.open``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokers import BrokerProcess, start_cluster, stop_all, wait_for_cluster
from tests.support.s3 import S3Endpoint
from tests.support.tiers import mark_tiers


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tiers(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


def _print_logs_on_failure(request: pytest.FixtureRequest, brokers: list[BrokerProcess]) -> None:
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        for broker in brokers:
            print(f"===== log of {broker!r} =====\n{broker.log_text()[-20000:]}")


@pytest.fixture
def broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """One running broker, id 1; ``broker.address`` is its gRPC address."""
    process = BrokerProcess(tmp_path / "broker-1", broker_id=1)
    try:
        yield process.start()
    finally:
        _print_logs_on_failure(request, [process])
        stop_all([process])


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[BrokerProcess]]:
    """Three running brokers, ids 1-3, each listing the others as peers."""
    brokers = start_cluster(tmp_path, 3)
    try:
        wait_for_cluster(brokers)
        yield brokers
    finally:
        _print_logs_on_failure(request, brokers)
        stop_all(brokers)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """The session's S3 server (moto), killed at the end of the session."""
    endpoint = S3Endpoint(log_path=tmp_path_factory.mktemp("s3") / "moto.log").start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


@pytest.fixture
def s3_store_uri(s3_endpoint: S3Endpoint) -> tuple[str, dict[str, Any]]:
    """A new, empty bucket on the session's S3 server: ``(uri, options)``."""
    return s3_endpoint.bucket()
