"""Bad input is the caller's error: a 400, 401 or 413 in the API's one error body
(``{"error": {...}}``), never a 500 or Django's HTML page, whichever layer refuses it
(the JSON parser, a filter, Django's request handling before any view)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.topics.models import Topic
from controlplane.topics.services import create_topic
from dataplane.broker.topics import MAX_TOPIC_LENGTH
from tests.controlplane.api_base import assert_error, make_cluster, make_tenant

DEEP = "[" * 50_000


@pytest.fixture
def raw_admin(client_for: Any) -> APIClient:
    """A platform admin whose client answers a server error with the 500 response
    (Django's test client re-raises it by default, hiding what a caller would see)."""
    client = client_for(platform_admin=True, username="operator")
    client.raise_request_exception = False
    return client


@pytest.fixture
def raw_anonymous(db: None) -> APIClient:
    return APIClient(raise_request_exception=False)


# -- the JSON parser bounds depth and size ---------------------------------------------------
def test_deeply_nested_json_to_the_token_endpoint_is_400(
    raw_anonymous: APIClient, local_identity: Any
) -> None:
    response = raw_anonymous.post("/api/v1/auth/token", DEEP, content_type="application/json")
    assert_error(response, 400, "malformed")


def test_deeply_nested_json_to_create_a_topic_is_400(raw_admin: APIClient) -> None:
    response = raw_admin.post("/api/v1/topics", DEEP, content_type="application/json")
    assert_error(response, 400, "malformed")


def test_deeply_nested_inside_a_valid_object_is_400(raw_admin: APIClient) -> None:
    body = '{"name": "orders", "partitions": ' + "[" * 1000 + "]" * 1000 + "}"
    response = raw_admin.post("/api/v1/topics", body, content_type="application/json")
    assert_error(response, 400, "malformed")


def test_depth_counts_brackets_outside_strings_only() -> None:
    from controlplane.core.api.parsers import MAX_JSON_DEPTH, json_depth_exceeds

    deepest = MAX_JSON_DEPTH
    assert not json_depth_exceeds("[" * deepest + "]" * deepest)
    assert json_depth_exceeds("[" * (deepest + 1) + "]" * (deepest + 1))
    assert json_depth_exceeds('{"a": ' * (deepest + 1) + "1" + "}" * (deepest + 1))
    assert not json_depth_exceeds('["' + "[{" * 100 + '"]')
    assert not json_depth_exceeds('["\\"' + "[" * 100 + '"]')  # \" does not end a string
    assert json_depth_exceeds('["\\\\", ' + "[" * 100 + "]" * 100 + "]")  # \\ then " does
    assert not json_depth_exceeds("[]" * 1000)  # many brackets, shallow


def test_brackets_inside_strings_do_not_count_as_depth(raw_admin: APIClient) -> None:
    make_cluster("local")
    make_tenant("acme")
    body = {"tenant": "acme", "name": "orders", "partitions": 1, "durability": "[" * 5000}
    response = raw_admin.post("/api/v1/topics", body, format="json")
    error = assert_error(response, 400, "invalid")
    assert "durability" in error["details"]


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10_000)
def test_a_json_body_over_the_upload_limit_is_413(raw_admin: APIClient) -> None:
    body = '{"name": "' + "x" * 20_000 + '"}'
    response = raw_admin.post("/api/v1/topics", body, content_type="application/json")
    assert_error(response, 413, "too_large")


def test_the_413_is_documented_for_every_write(anonymous_client: APIClient) -> None:
    paths = anonymous_client.get("/api/v1/openapi.json").json()["paths"]
    writes = [
        (path, method, operation)
        for path, item in paths.items()
        for method, operation in item.items()
        if method in ("post", "patch", "put", "delete")
    ]
    assert len(writes) > 10
    missing = [(path, method) for path, method, op in writes if "413" not in op["responses"]]
    assert missing == []


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10_000)
def test_a_form_body_over_the_upload_limit_is_413(
    raw_anonymous: APIClient, local_identity: Any
) -> None:
    body = "grant_type=client_credentials&client_id=" + "x" * 20_000
    response = raw_anonymous.post(
        "/api/v1/auth/token", body, content_type="application/x-www-form-urlencoded"
    )
    assert_error(response, 413, "too_large")


# -- filters -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "query",
    [
        "/api/v1/brokers?cluster=99999999999999999999",
        "/api/v1/brokers?cluster=-99999999999999999999",
        "/api/v1/brokers?cluster=1e400",
        "/api/v1/drift-findings?broker=99999999999999999999",
    ],
)
def test_a_number_out_of_range_in_a_filter_is_400(raw_admin: APIClient, query: str) -> None:
    error = assert_error(raw_admin.get(query), 400, "invalid")
    assert set(error["details"]) <= {"cluster", "broker"}, error


def test_every_filterset_of_the_api_has_the_bounded_base() -> None:
    from django.urls import get_resolver

    from controlplane.core.filtersets import FilterSet

    views = [p.callback for p in _patterns(get_resolver().url_patterns)]
    classes = {getattr(getattr(v, "cls", None), "filterset_class", None) for v in views}
    filtersets = {c for c in classes if c is not None}
    assert len(filtersets) >= 10
    assert all(issubclass(c, FilterSet) for c in filtersets), filtersets


def _patterns(patterns: list[Any]) -> list[Any]:
    from django.urls import URLResolver

    flat: list[Any] = []
    for pattern in patterns:
        flat += _patterns(pattern.url_patterns) if isinstance(pattern, URLResolver) else [pattern]
    return flat


def test_a_number_in_range_still_filters(raw_admin: APIClient) -> None:
    cluster = make_cluster("local")
    response = raw_admin.get(f"/api/v1/brokers?cluster={cluster.pk}")
    assert response.status_code == 200, response.content
    assert response.json()["count"] == 3
    assert raw_admin.get("/api/v1/brokers?cluster=9223372036854775807").json()["count"] == 0


# -- errors Django answers before or around the views ------------------------------------------
def test_a_disallowed_host_is_a_json_400(raw_admin: APIClient) -> None:
    response = raw_admin.get("/api/v1/regions", HTTP_HOST="evil.example")
    assert_error(response, 400, "bad_request")


def test_an_unknown_url_under_the_api_is_a_json_404(raw_admin: APIClient) -> None:
    assert_error(raw_admin.get("/api/v1/no-such-thing"), 404, "not_found")
    assert_error(raw_admin.get("/api/v2/"), 404, "not_found")


def test_a_csrf_failure_is_a_json_403(rf: Any) -> None:
    from django.middleware.csrf import _get_failure_view

    response = _get_failure_view()(rf.post("/api/v1/topics"), reason="CSRF cookie not set.")
    assert_error(_with_json(response), 403, "permission_denied")


@pytest.mark.parametrize("status", [400, 403, 500])
def test_djangos_error_handlers_answer_the_error_body(rf: Any, status: int) -> None:
    """``handler400``/``403``/``500``: what Django answers for an exception no view
    handled (a suspicious request, a permission refused by a middleware, a bug)."""
    from django.core.exceptions import PermissionDenied, SuspiciousOperation
    from django.urls import get_resolver

    view = get_resolver().resolve_error_handler(status)
    request = rf.get("/api/v1/topics")
    exception = {400: SuspiciousOperation("bad"), 403: PermissionDenied("no")}.get(status)
    response = view(request) if exception is None else view(request, exception)
    assert_error(_with_json(response), status)


def _with_json(response: Any) -> Any:
    """A response from a view called directly, with the test client's ``json()``."""
    response.json = lambda: json.loads(response.content)
    return response


# -- a topic name must fit the brokers' limit with its tenant prefix ------------------------------
def test_a_topic_name_too_long_with_its_tenant_prefix_is_400(raw_admin: APIClient) -> None:
    make_cluster("local")
    tenant = make_tenant("acme")
    longest = "t" * (MAX_TOPIC_LENGTH - len("acme."))
    body = {"tenant": "acme", "name": longest + "x", "partitions": 1}
    error = assert_error(raw_admin.post("/api/v1/topics", body, format="json"), 400, "invalid")
    assert "name" in error["details"], error
    assert not Topic.objects.filter(tenant=tenant).exists()
    body["name"] = longest
    response = raw_admin.post("/api/v1/topics", body, format="json")
    assert response.status_code == 201, response.content
    assert len(response.json()["full_name"]) == MAX_TOPIC_LENGTH


def test_a_200_character_topic_name_is_refused_by_the_api(client_for: Any, db: None) -> None:
    make_cluster("local")
    make_tenant("acme")
    client = client_for(roles={"acme": Role.DEVELOPER})
    response = client.post(
        "/api/v1/topics", {"tenant": "acme", "name": "a" * 200, "partitions": 1}, format="json"
    )
    assert_error(response, 400, "invalid")


def test_the_model_refuses_a_full_name_over_the_brokers_limit(db: None) -> None:
    """The same rule holds for a topic made without the API (``Model.clean``)."""
    from django.core.exceptions import ValidationError

    cluster = make_cluster("local")
    tenant = make_tenant("acme")
    topic = create_topic(tenant, name="orders", partitions=1, actor=Actor.system("tests"))
    topic.name = "a" * 200
    topic.full_name = f"acme.{topic.name}"
    with pytest.raises(ValidationError) as raised:
        topic.full_clean()
    assert "name" in raised.value.message_dict
    assert topic.cluster == cluster
