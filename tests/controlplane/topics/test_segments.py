"""A topic's segment settings on /api/v1/topics: ``max_segment_bytes`` and ``segment_ms``
(when a partition's active segment is sealed, hence uploaded when the topic is tiered)
default to the brokers' 1 GiB and 7 days, are bounded for tenants (1 MiB to 1 GiB, one
minute to 30 days), change like any setting, are pushed in the desired config, and lane
topics copy their trunk's."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.tenants.models import Tenant
from controlplane.topics import services
from controlplane.topics.drift import desired_config
from controlplane.topics.models import Topic
from tests.controlplane.api_base import assert_error, make_cluster
from tests.support.controlplane import make_tenant

SYSTEM = Actor.system("tests")
URL = "/api/v1/topics"
MIB, GIB, DAY_MS = 2**20, 2**30, 24 * 3600 * 1000


@pytest.fixture
def acme(db: None) -> Tenant:
    make_cluster("local")
    return make_tenant("acme")


@pytest.fixture
def developer(acme: Tenant, client_for: Any) -> APIClient:
    client: APIClient = client_for(roles={"acme": Role.DEVELOPER})
    return client


def _create(client: APIClient, **fields: Any) -> Any:
    return client.post(URL, {"name": "orders", "partitions": 2, **fields}, format="json")


def test_the_defaults_are_the_brokers(developer: APIClient) -> None:
    body = _create(developer).json()

    assert (body["max_segment_bytes"], body["segment_ms"]) == (GIB, 7 * DAY_MS)
    config = desired_config(Topic.objects.get(full_name="acme.orders")).to_proto()
    assert (config.max_segment_bytes, config.segment_ms) == (GIB, 7 * DAY_MS)


def test_a_topic_keeps_its_segment_settings_and_pushes_them(developer: APIClient) -> None:
    response = _create(developer, max_segment_bytes=MIB, segment_ms=60_000)

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["max_segment_bytes"], body["segment_ms"]) == (MIB, 60_000)
    config = desired_config(Topic.objects.get(full_name="acme.orders")).to_proto()
    assert (config.max_segment_bytes, config.segment_ms) == (MIB, 60_000)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_segment_bytes", MIB - 1),
        ("max_segment_bytes", GIB + 1),
        ("max_segment_bytes", 14),
        ("segment_ms", 59_999),
        ("segment_ms", 30 * DAY_MS + 1),
        ("segment_ms", 0),
        ("segment_ms", "soon"),
    ],
)
def test_out_of_bounds_segment_settings_are_a_400_naming_the_field(
    developer: APIClient, field: str, value: Any
) -> None:
    error = assert_error(_create(developer, **{field: value}), 400, "invalid")

    assert field in error["details"], error
    assert not Topic.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_segment_bytes", MIB), ("max_segment_bytes", GIB), ("segment_ms", 60_000),
     ("segment_ms", 30 * DAY_MS)],
)  # fmt: skip
def test_the_bounds_themselves_are_taken(developer: APIClient, field: str, value: int) -> None:
    response = _create(developer, **{field: value})

    assert response.status_code == 201, response.content


def test_changing_a_segment_setting_is_a_change(developer: APIClient) -> None:
    _create(developer)

    response = developer.patch(f"{URL}/acme.orders", {"segment_ms": 3_600_000}, format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["segment_ms"], response.json()["generation"]) == (3_600_000, 2)
    refused = developer.patch(f"{URL}/acme.orders", {"max_segment_bytes": 1024}, format="json")
    assert "max_segment_bytes" in assert_error(refused, 400, "invalid")["details"]
    assert Topic.objects.get(full_name="acme.orders").max_segment_bytes == GIB


def test_the_model_refuses_what_the_api_refuses(acme: Tenant) -> None:
    """``full_clean`` holds the bounds too (the console and the admin go through it)."""
    topic = services.create_topic(acme, name="orders", partitions=1, actor=SYSTEM)
    topic.max_segment_bytes, topic.segment_ms = 1024, 1

    with pytest.raises(ValidationError) as refused:
        topic.full_clean()

    assert {"max_segment_bytes", "segment_ms"} <= set(refused.value.message_dict)


def test_lane_topics_copy_their_trunks_segment_settings(acme: Tenant) -> None:
    trunk = services.create_topic(acme, name="orders", partitions=2, max_segment_bytes=8 * MIB,
                                  segment_ms=600_000, actor=SYSTEM)  # fmt: skip
    lane = services.create_lane_topic(trunk, lane="ppe", partitions=1, actor=SYSTEM)
    assert (lane.max_segment_bytes, lane.segment_ms) == (8 * MIB, 600_000)

    services.update_topic(trunk, segment_ms=120_000, actor=SYSTEM)

    lane.refresh_from_db()
    assert lane.segment_ms == 120_000
