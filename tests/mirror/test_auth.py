"""A worker with authentication on in both regions: its identity comes from the token
endpoint through the client secret file its configuration names, and a configuration
naming a secret file others can read is refused."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mirror.support import assert_copied_exactly, produce
from tests.support.issuer import TestIssuer
from tests.support.mirror import Region, WorkerProcess, link_config, read_all

TOPIC = "acme.orders"
PARTITIONS = 2
CLIENT = "acme--mirror-orders"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[TestIssuer, Region, Region]]:
    with TestIssuer() as issuer:
        issuer.add_client(CLIENT, "mirror-secret", tenants={"acme": "developer"})
        token = issuer.internal_token()
        regions = []
        try:
            for name in ("east", "west"):
                region = Region.start(
                    tmp_path / name, extra_args=issuer.broker_args(), admin_token=token
                )
                regions.append(region)
                region.create_topic(TOPIC, PARTITIONS)
            yield issuer, regions[0], regions[1]
        finally:
            for region in regions:
                region.stop()


def test_a_worker_authenticates_with_its_client_secret_file(
    secured: tuple[TestIssuer, Region, Region], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    issuer, east, west = secured
    developer = issuer.token(tenants={"acme": "developer"})
    produce(east.bootstrap, TOPIC, PARTITIONS, "east", 0, 2_000, token=developer)
    secret = tmp_path / "secret"
    secret.write_text("mirror-secret\n")
    secret.chmod(0o644)
    credentials = {"token_url": issuer.token_url, "client_id": CLIENT,
                   "client_secret_file": str(secret)}  # fmt: skip
    config = link_config(east, west, {TOPIC: PARTITIONS}, credentials=credentials)
    worker = WorkerProcess(tmp_path / "worker", config)
    workers.append(worker)
    with pytest.raises(AssertionError, match="readable by others"):
        worker.start()
    os.chmod(secret, 0o600)
    worker.start()
    worker.wait_caught_up()
    assert (
        assert_copied_exactly(
            read_all(east.bootstrap, TOPIC, PARTITIONS, token=developer),
            read_all(west.bootstrap, TOPIC, PARTITIONS, token=developer),
            "east",
        )
        == 2_000
    )
