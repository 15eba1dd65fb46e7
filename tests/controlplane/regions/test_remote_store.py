"""A cluster's object store (tiered storage): platform administrators set it; its options
are a secret that no answer, console page or audit record holds; the URI and options are
checked; a store in use does not move; local brokers get the URI as a flag and the
options in a private file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.provisioning.local import LocalProvisioner
from controlplane.regions import services
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import assert_error
from tests.support.controlplane import make_tenant

pytestmark = pytest.mark.django_db
ADMIN = Actor.system("test")
SECRET = "s3cr3t-Key-Value-8731"
OPTIONS = {"key": "AKIA-test", "secret": SECRET, "client_kwargs": {"endpoint_url": "http://x"}}


@pytest.fixture
def region() -> Region:
    return services.create_region(name="eu-west", actor=ADMIN)


def _create(admin_client: APIClient, **fields: Any) -> Any:
    body = {"region": "eu-west", "name": "main", "provisioner": "static", "broker_count": 1}
    return admin_client.post("/api/v1/clusters", body | fields, format="json")


def _assert_no_secret(response: Any) -> None:
    assert SECRET not in response.content.decode()
    assert 'remote_store_options"' not in response.content.decode()


def test_the_store_is_set_and_its_options_never_returned(
    admin_client: APIClient, region: Region
) -> None:
    created = _create(
        admin_client, remote_store_uri="s3://tier/eu-west", remote_store_options=OPTIONS
    )

    assert created.status_code == 201, created.content
    _assert_no_secret(created)
    body = created.json()
    assert (body["remote_store_uri"], body["remote_store_options_set"]) == (
        "s3://tier/eu-west",
        True,
    )
    cluster = Cluster.objects.get(pk=body["id"])
    assert cluster.remote_store_options == OPTIONS
    for response in (
        admin_client.get("/api/v1/clusters"),
        admin_client.get(f"/api/v1/clusters/{cluster.pk}"),
        admin_client.patch(f"/api/v1/clusters/{cluster.pk}", {"broker_count": 2}, format="json"),
        admin_client.get("/api/v1/audit-events"),
    ):
        assert response.status_code in (200, 404), response.content
        _assert_no_secret(response)
    for event in AuditEvent.objects.all():
        assert SECRET not in json.dumps([event.before, event.after])


def test_options_are_rotated_and_cleared_and_audited_as_set_or_not(
    admin_client: APIClient, region: Region
) -> None:
    cluster_id = _create(admin_client, remote_store_uri="/srv/objects").json()["id"]
    path = f"/api/v1/clusters/{cluster_id}"

    rotated = admin_client.patch(path, {"remote_store_options": OPTIONS}, format="json")
    assert rotated.json()["remote_store_options_set"] is True
    _assert_no_secret(rotated)
    cleared = admin_client.patch(path, {"remote_store_options": {}}, format="json")
    assert cleared.json()["remote_store_options_set"] is False

    events = AuditEvent.objects.filter(action="cluster.remote_store").order_by("pk")
    assert [(e.before["remote_store_options_set"], e.after["remote_store_options_set"])
            for e in events] == [(False, True), (True, False)]  # fmt: skip


@pytest.mark.parametrize(
    "fields",
    [
        {"remote_store_uri": "ftp://host/objects"},
        {"remote_store_uri": "relative/folder"},
        {"remote_store_uri": "s3://"},
        {"remote_store_uri": "s3:/bucket"},
        {
            "remote_store_uri": "/srv/o",
            "remote_store_options": {"a": {"b": {"c": {"d": {"e": 1}}}}},
        },
        {"remote_store_uri": "/srv/o", "remote_store_options": {"blob": "x" * 20_000}},
        {"remote_store_uri": "/srv/o", "remote_store_options": ["not", "an", "object"]},
        {"remote_store_options": {"key": "k"}},  # options without a store
    ],
)
def test_a_bad_store_is_a_400(
    admin_client: APIClient, region: Region, fields: dict[str, Any]
) -> None:
    error = assert_error(_create(admin_client, **fields), 400)

    assert set(error["details"]) & {"remote_store_uri", "remote_store_options"}, error
    assert not Cluster.objects.exists()


@pytest.mark.parametrize(
    "uri", ["", "/srv/objects", "file:///srv/objects", "s3://bucket/prefix", "gs://b", "memory://t"]
)
def test_folder_paths_and_known_schemes_are_taken(
    admin_client: APIClient, region: Region, uri: str
) -> None:
    assert _create(admin_client, remote_store_uri=uri).status_code == 201


def test_tenants_cannot_see_or_set_a_clusters_store(client_for: Any, region: Region) -> None:
    cluster = services.create_cluster(
        region, name="main", provisioner="static", broker_count=1, actor=ADMIN,
        remote_store_uri="s3://tier", remote_store_options=OPTIONS,
    )  # fmt: skip
    make_tenant("acme", region=region)
    tenant_admin = client_for(roles={"acme": Role.TENANT_ADMIN})

    assert tenant_admin.get(f"/api/v1/clusters/{cluster.pk}").status_code == 403
    response = tenant_admin.patch(
        f"/api/v1/clusters/{cluster.pk}", {"remote_store_uri": "/tmp/mine"}, format="json"
    )
    assert response.status_code == 403
    _assert_no_secret(response)
    cluster.refresh_from_db()
    assert cluster.remote_store_uri == "s3://tier"
    for path in ("/api/v1/regions", "/api/v1/topics", "/api/v1/tenants/acme"):
        _assert_no_secret(tenant_admin.get(path))


def test_the_store_does_not_move_under_tiered_topics(
    admin_client: APIClient, region: Region
) -> None:
    cluster = services.create_cluster(
        region, name="main", provisioner="static", broker_count=1, actor=ADMIN,
        remote_store_uri="s3://tier",
    )  # fmt: skip
    Cluster.objects.filter(pk=cluster.pk).update(status="ready")
    Broker.objects.filter(cluster=cluster).update(port=40001, phase="ready")
    tenant = make_tenant("acme", region=region)
    create_topic(tenant, name="orders", partitions=1, remote_storage=True, actor=ADMIN)

    path = f"/api/v1/clusters/{cluster.pk}"
    assert_error(admin_client.patch(path, {"remote_store_uri": "s3://other"}, format="json"), 409)
    rotated = admin_client.patch(path, {"remote_store_options": OPTIONS}, format="json")
    assert rotated.status_code == 200, rotated.content


def test_local_brokers_get_the_store_uri_and_a_private_options_file(
    region: Region, tmp_path: Path
) -> None:
    cluster = services.create_cluster(
        region, name="main", provisioner="local", broker_count=1, actor=ADMIN,
        remote_store_uri="s3://tier/eu-west", remote_store_options=OPTIONS,
    )  # fmt: skip
    Broker.objects.filter(cluster=cluster).update(port=40001)
    broker = Broker.objects.get(cluster=cluster)
    provisioner = LocalProvisioner(tmp_path / "brokers")

    command = provisioner.command(broker)

    assert SECRET not in " ".join(command)
    uri_at = command.index("--remote-store-uri")
    assert command[uri_at + 1] == "s3://tier/eu-west"
    options_file = Path(command[command.index("--remote-store-options-file") + 1])
    assert json.loads(options_file.read_text()) == OPTIONS
    assert stat.S_IMODE(os.stat(options_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(options_file.parent).st_mode) == 0o700

    services.set_remote_store(cluster, options={}, actor=ADMIN)
    broker.refresh_from_db()
    command = provisioner.command(broker)
    assert "--remote-store-options-file" not in command
    assert not options_file.exists()  # no stale credentials left


def test_local_brokers_of_a_cluster_without_a_store_get_no_store_flags(
    region: Region, tmp_path: Path
) -> None:
    cluster = services.create_cluster(
        region, name="main", provisioner="local", broker_count=1, actor=ADMIN
    )
    Broker.objects.filter(cluster=cluster).update(port=40001)

    command = LocalProvisioner(tmp_path / "brokers").command(Broker.objects.get(cluster=cluster))

    assert not any(arg.startswith("--remote-store") for arg in command)
