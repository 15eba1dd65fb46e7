"""Fixtures: a token issuer and one broker with authentication on, shared by a module.

The broker hosts ``acme.orders`` (2 partitions), ``acme.audit`` and ``beta.secret``
(created with an internal token); tokens for tenants ``acme`` and ``beta`` come from
``issuer``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer

from .support import caller, create_topic

TOPICS = {"acme.orders": 2, "acme.audit": 1, "beta.secret": 1}


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer() as running:
        yield running


@pytest.fixture(scope="module")
def secured_broker(
    tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer
) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("secured")
    process = BrokerProcess(directory / "broker-1", broker_id=1, extra_args=issuer.broker_args())
    process.start()
    try:
        with caller(process.address, issuer.internal_token()) as internal:
            for topic, partitions in TOPICS.items():
                create_topic(internal, topic, partitions)
        yield process
    finally:
        process.kill()
