"""Fixtures of the Kafka-client tests: the authenticated cluster of ``support``, one per
module that asks for it, its logs printed at the end if a test of the module failed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dataplane.broker.kafka import support
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer() as running:
        yield support.add_clients(running)


@pytest.fixture(scope="module")
def kafka_cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, issuer: TestIssuer
) -> Iterator[list[BrokerProcess]]:
    root: Path = tmp_path_factory.mktemp("kafka-auth")
    failed_before = request.session.testsfailed
    with support.auth_cluster(root, issuer) as brokers:
        yield brokers
        if request.session.testsfailed > failed_before:
            for broker in brokers:
                print(f"===== log of {broker!r} =====\n{broker.log_text()[-20000:]}")
