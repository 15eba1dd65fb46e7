"""Tiered storage on /api/v1/topics: ``remote_storage`` needs the cluster's object store
and stays on, the local retentions are bounded by the totals, lane topics copy their
trunk's settings, another tenant's topic is a 404, and the detail shows local and remote
bytes as the reconciler last observed them."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics import services
from controlplane.topics.drift import desired_config
from controlplane.topics.models import PartitionAssignment, Topic
from tests.controlplane.api_base import assert_error, make_cluster
from tests.support.controlplane import make_tenant

SYSTEM = Actor.system("tests")
URL = "/api/v1/topics"


@pytest.fixture
def cluster(db: None) -> Cluster:
    cluster = make_cluster("local")
    cluster.remote_store_uri = "s3://tier/local"
    cluster.save()
    return cluster


@pytest.fixture
def acme(cluster: Cluster) -> Tenant:
    return make_tenant("acme")


@pytest.fixture
def developer(acme: Tenant, client_for: Any) -> APIClient:
    client: APIClient = client_for(roles={"acme": Role.DEVELOPER})
    return client


def _create(client: APIClient, **fields: Any) -> Any:
    return client.post(URL, {"name": "orders", "partitions": 2, **fields}, format="json")


def test_a_topic_with_remote_storage_keeps_its_settings(developer: APIClient) -> None:
    response = _create(
        developer, remote_storage=True, local_retention_ms=3_600_000, local_retention_bytes=2**20
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["remote_storage"], body["local_retention_ms"], body["local_retention_bytes"]) == (
        True,
        3_600_000,
        2**20,
    )
    topic = Topic.objects.get(full_name="acme.orders")
    config = desired_config(topic)
    assert (config.remote_storage, config.local_retention_ms, config.topic_id) == (
        True,
        3_600_000,
        str(topic.pk),
    )
    assert config.to_proto().topic_id == str(topic.pk)


def test_the_defaults_are_off_and_the_totals(developer: APIClient) -> None:
    body = _create(developer).json()

    assert (body["remote_storage"], body["local_retention_ms"], body["local_retention_bytes"]) == (
        False,
        -2,
        -2,
    )


def test_remote_storage_on_a_cluster_without_a_store_is_a_typed_400(
    cluster: Cluster, developer: APIClient
) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(remote_store_uri="")

    error = assert_error(_create(developer, remote_storage=True), 400, "remote_storage_unavailable")

    assert "remote_storage" in error["details"]
    assert not Topic.objects.exists()
    topic = services.create_topic(Tenant.objects.get(slug="acme"), name="plain", partitions=1,
                                  actor=SYSTEM)  # fmt: skip
    response = developer.patch(f"{URL}/{topic.full_name}", {"remote_storage": True}, format="json")
    assert_error(response, 400, "remote_storage_unavailable")


def test_remote_storage_cannot_be_turned_off(developer: APIClient) -> None:
    _create(developer, remote_storage=True)

    response = developer.patch(f"{URL}/acme.orders", {"remote_storage": False}, format="json")

    error = assert_error(response, 400, "remote_storage_irreversible")
    assert "remote_storage" in error["details"]
    assert Topic.objects.get(full_name="acme.orders").remote_storage


def test_turning_remote_storage_on_later_is_a_change(developer: APIClient) -> None:
    _create(developer)

    response = developer.patch(
        f"{URL}/acme.orders", {"remote_storage": True, "local_retention_ms": 60_000}, format="json"
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["remote_storage"], body["local_retention_ms"], body["generation"]) == (
        True,
        60_000,
        2,
    )
    event = AuditEvent.objects.filter(action="topic.update").latest("pk")
    assert (event.before["remote_storage"], event.after["remote_storage"]) == (False, True)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"local_retention_ms": -3}, "local_retention_ms"),
        ({"local_retention_bytes": -7}, "local_retention_bytes"),
        ({"retention_ms": 3_600_000, "local_retention_ms": 3_600_001}, "local_retention_ms"),
        ({"retention_bytes": 2**21, "local_retention_bytes": 2**22}, "local_retention_bytes"),
        ({"remote_storage": "sometimes"}, "remote_storage"),
    ],
)
def test_bad_local_retentions_are_a_400_naming_the_field(
    developer: APIClient, fields: dict[str, Any], field: str
) -> None:
    error = assert_error(_create(developer, **fields), 400, "invalid")

    assert field in error["details"], error


@pytest.mark.parametrize("value", [-2, -1, 0, 3_600_000])
def test_local_retention_takes_the_total_unlimited_or_a_bound(
    developer: APIClient, value: int
) -> None:
    response = _create(developer, retention_ms=3_600_000, local_retention_ms=value)

    assert response.status_code == 201, response.content


def test_lowering_the_total_below_the_local_retention_is_refused(developer: APIClient) -> None:
    _create(developer, retention_ms=7_200_000, local_retention_ms=3_600_000)

    response = developer.patch(f"{URL}/acme.orders", {"retention_ms": 1_800_000}, format="json")

    error = assert_error(response, 400)
    assert "local_retention_ms" in error["details"], error


def test_another_tenants_topic_answers_as_a_missing_one(
    acme: Tenant, client_for: Any, developer: APIClient
) -> None:
    make_tenant("globex")
    theirs = services.create_topic(
        Tenant.objects.get(slug="globex"), name="orders", partitions=1, actor=SYSTEM
    )

    response = developer.patch(f"{URL}/{theirs.full_name}", {"remote_storage": True}, format="json")

    assert_error(response, 404, "not_found")
    theirs.refresh_from_db()
    assert not theirs.remote_storage


def test_lane_topics_copy_their_trunks_settings(acme: Tenant) -> None:
    trunk = services.create_topic(
        acme, name="orders", partitions=2, remote_storage=True, local_retention_ms=60_000,
        local_retention_bytes=2**20, actor=SYSTEM,
    )  # fmt: skip
    lane = services.create_lane_topic(trunk, lane="ppe", partitions=1, actor=SYSTEM)
    assert (lane.remote_storage, lane.local_retention_ms, lane.local_retention_bytes) == (
        True,
        60_000,
        2**20,
    )

    services.update_topic(trunk, local_retention_ms=120_000, actor=SYSTEM)

    lane.refresh_from_db()
    assert lane.local_retention_ms == 120_000
    assert desired_config(lane).topic_id == str(lane.pk)  # its own objects in the store


def test_the_detail_shows_local_and_remote_bytes_as_observed(
    acme: Tenant, developer: APIClient
) -> None:
    topic = services.create_topic(acme, name="orders", partitions=2, remote_storage=True,
                                  actor=SYSTEM)  # fmt: skip
    PartitionAssignment.objects.filter(topic=topic, partition=0).update(
        size_bytes=1000, remote_bytes=5000
    )
    PartitionAssignment.objects.filter(topic=topic, partition=1).update(
        size_bytes=200, remote_bytes=0
    )

    body = developer.get(f"{URL}/acme.orders").json()

    assert (body["local_bytes"], body["remote_bytes"]) == (1200, 5000)
    listed = developer.get(URL, {"remote_storage": "true"}).json()["results"]
    assert [row["full_name"] for row in listed] == ["acme.orders"]
