"""The regions, clusters and brokers operations answer as the OpenAPI document says:
requests generated from the schema (schemathesis) for a platform administrator and a
tenant developer get no 5xx, documented statuses and bodies matching their schemas."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from controlplane.accounts.identity import LocalIdentity
from controlplane.core.actors import Actor
from controlplane.regions import services
from tests.controlplane.conftest import token_for

OURS = ("/api/v1/regions", "/api/v1/clusters", "/api/v1/brokers")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
EXAMPLES_PER_OPERATION = 6


@pytest.fixture
def wsgi_app(db: None) -> Iterator[WSGIHandler]:
    """Django's WSGI app inside the test's transaction (requests keep its connection)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield WSGIHandler()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def test_every_operation_answers_as_documented(
    wsgi_app: WSGIHandler, local_identity: LocalIdentity
) -> None:
    actor = Actor.system("tests")
    region = services.create_region(name="eu-west", actor=actor)
    services.create_cluster(region, name="main", provisioner="local", broker_count=2, actor=actor)
    static = services.create_cluster(
        region, name="far", provisioner="static", broker_count=1, actor=actor
    )
    services.register_broker(static, broker_id=1, host="10.0.0.1", port=9092, actor=actor)
    tokens = [
        token_for(local_identity, platform_admin=True),
        token_for(local_identity, roles={"acme": "developer"}),
    ]
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", wsgi_app)
    operations = [r.ok() for r in schema.get_all_operations()]
    ours = [op for op in operations if op.path.startswith(OURS)]
    assert len(ours) >= 12
    for operation in ours:
        for token in tokens:
            _explore(operation, token)


def _explore(operation: Any, token: str) -> None:
    @given(case=operation.as_strategy())
    @hypothesis_settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)

    run()
