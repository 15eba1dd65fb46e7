"""The OpenAPI document: public, JSON, and true to what the API answers. The
property-based part generates requests for every operation of the document from the
schema (schemathesis), as a platform admin and as a tenant developer, and checks every
answer: no 5xx, a documented status, and a body matching the documented schema."""

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
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from controlplane.accounts import services as accounts
from controlplane.accounts.identity import LocalIdentity
from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.regions import services as regions
from controlplane.regions.models import Broker
from controlplane.topics.acls import grant_topic_acl
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import make_cluster, make_tenant
from tests.controlplane.conftest import token_for
from tests.support.brokers import BrokerProcess

SCHEMA_URL = "/api/v1/openapi.json"
PATHS = (
    "/api/v1/tenants",
    "/api/v1/topics",
    "/api/v1/topic-acls",
    "/api/v1/quotas",
    "/api/v1/audit-events",
    "/api/v1/drift-findings",
    "/api/v1/regions",
    "/api/v1/clusters",
    "/api/v1/brokers",
    "/api/v1/members",
    "/api/v1/service-accounts",
    "/api/v1/auth/token",
    "/api/v1/auth/jwks.json",
    "/api/v1/auth/whoami",
    "/api/v1/groups",
    "/api/v1/exports",
    "/api/v1/indexes",
)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
EXAMPLES_PER_OPERATION = 15  # per caller and operation: the whole run takes ~20 s


def test_the_document_is_public_json(anonymous_client: Any) -> None:
    response = anonymous_client.get(SCHEMA_URL)
    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0] in {
        "application/json",
        "application/vnd.oai.openapi+json",
    }
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert set(PATHS) <= set(document["paths"])
    assert "/api/v1/topics/{full_name}" in document["paths"]
    for path in ("/api/v1/exports/{name}/runs", "/api/v1/indexes/{name}/builds",
                 "/api/v1/indexes/{name}/query"):  # fmt: skip
        assert path in document["paths"]
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_the_tiered_storage_fields_are_documented(anonymous_client: Any) -> None:
    """Topics' tiered settings (with the segment settings that say when a segment is
    sealed, hence uploaded) and observed sizes; a cluster's store, whose options are
    written only (never in an answer's schema)."""
    schemas = anonymous_client.get(SCHEMA_URL).json()["components"]["schemas"]
    tiered = {
        "remote_storage",
        "local_retention_ms",
        "local_retention_bytes",
        "max_segment_bytes",
        "segment_ms",
    }
    assert tiered <= set(schemas["Topic"]["properties"])
    assert tiered <= set(schemas["TopicSummary"]["properties"])
    assert {"local_bytes", "remote_bytes"} <= set(schemas["Topic"]["properties"])
    assert tiered <= set(schemas["TopicCreateRequest"]["properties"])
    assert tiered <= set(schemas["PatchedTopicUpdateRequest"]["properties"])
    cluster = schemas["Cluster"]["properties"]
    assert {"remote_store_uri", "remote_store_options_set"} <= set(cluster)
    assert "remote_store_options" not in cluster
    assert "remote_store_options" in schemas["ClusterCreateRequest"]["properties"]
    assert "remote_store_options" in schemas["PatchedClusterUpdateRequest"]["properties"]


def test_the_kafka_listener_fields_are_documented(anonymous_client: Any) -> None:
    """Brokers show their Kafka port and address (read only); registering a static
    broker takes an optional Kafka port, 1-65535."""
    schemas = anonymous_client.get(SCHEMA_URL).json()["components"]["schemas"]
    broker = schemas["Broker"]["properties"]
    assert broker["kafka_port"] == {"type": "integer", "readOnly": True, "nullable": True}
    assert broker["kafka_address"]["readOnly"] is True
    assert "kafka_address" in schemas["BrokerSummary"]["properties"]
    register = schemas["BrokerRegisterRequest"]
    assert "kafka_port" not in register["required"]
    port = register["properties"]["kafka_port"]
    assert (port["type"], port["minimum"], port["maximum"]) == ("integer", 1, 65535)


def test_a_bad_token_does_not_hide_the_document(anonymous_client: Any) -> None:
    anonymous_client.credentials(HTTP_AUTHORIZATION="Bearer nonsense")
    assert anonymous_client.get(SCHEMA_URL).status_code == 200


def test_errors_are_documented_with_the_error_body(anonymous_client: Any) -> None:
    operation = anonymous_client.get(SCHEMA_URL).json()["paths"]["/api/v1/topics"]["post"]
    assert {"201", "400", "401", "403", "404", "409"} <= set(operation["responses"])
    body = operation["responses"]["409"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/Error"}


@pytest.fixture
def wsgi_app(db: None) -> Iterator[WSGIHandler]:
    """Django's WSGI app for in-process requests inside the test's transaction: as
    Django's own test client does, requests must not close the connection that holds it."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield WSGIHandler()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def test_every_operation_answers_as_documented(
    wsgi_app: WSGIHandler, local_identity: LocalIdentity, broker: BrokerProcess
) -> None:
    actor = Actor.system("tests")
    cluster = make_cluster("local")
    static = regions.create_cluster(
        cluster.region, name="far", provisioner="static", broker_count=1, actor=actor
    )
    regions.register_broker(static, broker_id=1, host="127.0.0.1", port=1, actor=actor)
    acme = make_tenant("acme")
    make_tenant("globex")
    orders = create_topic(acme, name="orders", partitions=2, actor=actor)
    account, _ = accounts.create_service_account(acme, name="ci-app", actor=actor)
    grant_topic_acl(orders, principal=account.client_id, operations=["consume"], actor=actor)
    accounts.invite_member(acme, username="alice", email="a@acme.test", role="viewer", actor=actor)
    # Every broker row is the one real broker, so what asks the brokers (groups) answers.
    host, port = broker.address.rsplit(":", 1)
    Broker.objects.update(host=host, port=int(port))
    callers = {
        "platform admin": token_for(local_identity, platform_admin=True),
        "tenant developer": token_for(local_identity, roles={"acme": Role.DEVELOPER}),
    }
    schema = schemathesis.openapi.from_wsgi(SCHEMA_URL, wsgi_app)
    results = list(schema.get_all_operations())
    operations = [r.ok() for r in results if isinstance(r, Ok)]
    assert len(operations) == len(results), "every operation's schema is valid"
    ours = operations
    assert {op.path.split("/{")[0] for op in ours} >= set(PATHS)
    for operation in ours:
        for token in callers.values():
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
