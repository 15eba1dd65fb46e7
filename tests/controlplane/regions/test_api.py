"""The regions API: regions readable by every caller (controller details for platform
administrators only), clusters and brokers for platform administrators only; services
create broker rows, register static brokers, refuse what is not supported, and audit."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent
from controlplane.regions import services, teardown
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.topics.models import Topic
from tests.support.controlplane import make_tenant

pytestmark = pytest.mark.django_db
ADMIN = Actor.system("test")


@pytest.fixture
def region() -> Region:
    return services.create_region(name="eu-west", display_name="Europe (west)", actor=ADMIN)


@pytest.fixture
def tenant_client(client_for) -> APIClient:  # type: ignore[no-untyped-def]
    make_tenant("acme")  # a role counts only in a live tenant
    return client_for(roles={"acme": "tenant-admin"})


def _error_code(response) -> str:  # type: ignore[no-untyped-def]
    return response.json()["error"]["code"]


def test_anonymous_callers_are_refused(anonymous_client: APIClient, region: Region) -> None:
    for path in ("/api/v1/regions", "/api/v1/clusters", "/api/v1/brokers"):
        response = anonymous_client.get(path)
        assert response.status_code == 401, path
        assert _error_code(response) == "not_authenticated"


def test_any_caller_reads_regions_but_only_admins_see_the_controller(
    tenant_client: APIClient, admin_client: APIClient, region: Region
) -> None:
    services.take_over_region("eu-west", controller_id="host:1", actor=ADMIN)
    (item,) = tenant_client.get("/api/v1/regions").json()["results"]
    assert item["name"] == "eu-west"
    assert item["controller"] is None
    admin_view = admin_client.get("/api/v1/regions/eu-west").json()
    assert admin_view["controller"]["id"] == "host:1"
    assert admin_view["controller"]["epoch"] == 1


def test_only_platform_admins_write_regions(
    tenant_client: APIClient, admin_client: APIClient
) -> None:
    refused = tenant_client.post("/api/v1/regions", {"name": "us-east"}, format="json")
    assert refused.status_code == 403
    assert not Region.objects.filter(name="us-east").exists()
    created = admin_client.post(
        "/api/v1/regions", {"name": "us-east", "display_name": "US east"}, format="json"
    )
    assert created.status_code == 201, created.json()
    assert created.json()["name"] == "us-east"
    again = admin_client.post("/api/v1/regions", {"name": "us-east"}, format="json")
    assert again.status_code == 409
    bad = admin_client.post("/api/v1/regions", {"name": "US East!"}, format="json")
    assert bad.status_code == 400
    assert _error_code(bad) == "invalid"
    event = AuditEvent.objects.get(action="region.create", object_repr="us-east")
    assert event.actor_name == "operator"
    assert event.after["display_name"] == "US east"


def test_a_region_with_clusters_cannot_be_deleted(admin_client: APIClient, region: Region) -> None:
    services.create_cluster(region, name="main", provisioner="static", broker_count=1, actor=ADMIN)
    assert admin_client.delete("/api/v1/regions/eu-west").status_code == 409
    empty = services.create_region(name="ap-south", actor=ADMIN)
    assert admin_client.delete(f"/api/v1/regions/{empty.name}").status_code == 204
    assert not Region.objects.filter(name="ap-south").exists()


def test_clusters_and_brokers_are_for_platform_admins_only(
    tenant_client: APIClient, region: Region
) -> None:
    cluster = services.create_cluster(
        region, name="main", provisioner="local", broker_count=1, actor=ADMIN
    )
    for path in ("/api/v1/clusters", f"/api/v1/clusters/{cluster.pk}", "/api/v1/brokers"):
        response = tenant_client.get(path)
        assert response.status_code == 403, path
        assert _error_code(response) == "permission_denied"


def test_creating_a_cluster_creates_its_pending_brokers(
    admin_client: APIClient, region: Region
) -> None:
    response = admin_client.post(
        "/api/v1/clusters",
        {"region": "eu-west", "name": "main", "provisioner": "local", "broker_count": 3},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "pending"
    assert [(b["broker_id"], b["phase"]) for b in body["brokers"]] == [
        (1, "pending"),
        (2, "pending"),
        (3, "pending"),
    ]
    duplicate = admin_client.post(
        "/api/v1/clusters",
        {"region": "eu-west", "name": "main", "provisioner": "local", "broker_count": 1},
        format="json",
    )
    assert duplicate.status_code == 409
    assert AuditEvent.objects.filter(action="cluster.create").count() == 1


def test_a_cluster_grows_but_does_not_shrink(admin_client: APIClient, region: Region) -> None:
    cluster = services.create_cluster(
        region, name="main", provisioner="local", broker_count=2, actor=ADMIN
    )
    path = f"/api/v1/clusters/{cluster.pk}"
    grown = admin_client.patch(path, {"broker_count": 3}, format="json")
    assert grown.status_code == 200, grown.json()
    assert sorted(cluster.brokers.values_list("broker_id", flat=True)) == [1, 2, 3]
    shrunk = admin_client.patch(path, {"broker_count": 1}, format="json")
    assert shrunk.status_code == 409
    assert "decommission" in shrunk.json()["error"]["message"]


def test_a_cluster_with_topics_cannot_be_deleted(admin_client: APIClient, region: Region) -> None:
    from controlplane.tenants.models import Tenant

    cluster = services.create_cluster(
        region, name="main", provisioner="static", broker_count=1, actor=ADMIN
    )
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    Topic.objects.create(
        tenant=tenant,
        cluster=cluster,
        name="orders",
        full_name="acme.orders",
        partitions=1,
        retention_ms=60_000,
        retention_bytes=2**20,
    )
    assert admin_client.delete(f"/api/v1/clusters/{cluster.pk}").status_code == 409
    assert Cluster.objects.get(pk=cluster.pk).status == "pending"


def test_deleting_an_empty_cluster_marks_it_deleting(
    admin_client: APIClient, region: Region
) -> None:
    cluster = services.create_cluster(
        region, name="main", provisioner="static", broker_count=1, actor=ADMIN
    )
    response = admin_client.delete(f"/api/v1/clusters/{cluster.pk}")
    assert response.status_code == 202
    assert response.json()["status"] == "deleting"
    # What the regions.delete_cluster job does after commit:
    teardown.remove_cluster(cluster.pk, actor=ADMIN)
    assert not Cluster.objects.filter(pk=cluster.pk).exists()


def test_brokers_of_static_clusters_are_registered_by_address(
    admin_client: APIClient, region: Region
) -> None:
    static = services.create_cluster(
        region, name="far", provisioner="static", broker_count=1, actor=ADMIN
    )
    body = {"cluster": static.pk, "broker_id": 1, "host": "10.0.0.5", "port": 9092}
    response = admin_client.post("/api/v1/brokers", body, format="json")
    assert response.status_code == 201, response.json()
    shown = response.json()
    assert (shown["address"], shown["phase"], shown["region"]) == (
        "10.0.0.5:9092",
        "pending",
        "eu-west",
    )
    assert shown["last_heartbeat_at"] is None
    added = admin_client.post(
        "/api/v1/brokers", {**body, "broker_id": 2, "port": 9093}, format="json"
    )
    assert added.status_code == 201
    assert Cluster.objects.get(pk=static.pk).broker_count == 2
    listed = admin_client.get("/api/v1/brokers", {"cluster": static.pk}).json()
    assert [b["address"] for b in listed["results"]] == ["10.0.0.5:9092", "10.0.0.5:9093"]
    # Broker 1 existed from the cluster's creation (no address yet); broker 2 is new.
    actions = AuditEvent.objects.filter(action__startswith="broker.").values_list("action")
    assert sorted(a for (a,) in actions) == ["broker.register", "broker.update"]


def test_a_static_broker_is_registered_with_its_kafka_port_or_none(
    admin_client: APIClient, region: Region
) -> None:
    """``kafka_port`` is optional (1 to 65535, not the gRPC port); the broker shows it and
    its Kafka address, null and "" without one; a new registration without it clears it."""
    static = services.create_cluster(
        region, name="far", provisioner="static", broker_count=1, actor=ADMIN
    )
    body = {"cluster": static.pk, "broker_id": 1, "host": "10.0.0.5", "port": 9092}
    response = admin_client.post("/api/v1/brokers", {**body, "kafka_port": 9094}, format="json")
    assert response.status_code == 201, response.json()
    shown = response.json()
    assert (shown["kafka_port"], shown["kafka_address"]) == (9094, "10.0.0.5:9094")
    assert Broker.objects.get(cluster=static, broker_id=1).kafka_port == 9094
    for bad in (0, 65536, 9092):
        refused = admin_client.post("/api/v1/brokers", {**body, "kafka_port": bad}, format="json")
        assert refused.status_code == 400, bad
        assert "kafka_port" in refused.json()["error"]["details"], refused.json()
    assert Broker.objects.get(cluster=static, broker_id=1).kafka_port == 9094
    again = admin_client.post("/api/v1/brokers", body, format="json")
    assert again.status_code == 201, again.json()
    assert (again.json()["kafka_port"], again.json()["kafka_address"]) == (None, "")
    listed = admin_client.get("/api/v1/clusters/" + str(static.pk)).json()["brokers"]
    assert [b["kafka_address"] for b in listed] == [""]


def test_brokers_of_local_clusters_are_not_registered(
    admin_client: APIClient, region: Region
) -> None:
    local = services.create_cluster(
        region, name="main", provisioner="local", broker_count=1, actor=ADMIN
    )
    body = {"cluster": local.pk, "broker_id": 2, "host": "10.0.0.5", "port": 9092}
    response = admin_client.post("/api/v1/brokers", body, format="json")
    assert response.status_code == 409
    assert not Broker.objects.filter(cluster=local, broker_id=2).exists()


def test_decommissioning_a_broker_moves_its_replicas_away(
    admin_client: APIClient, region: Region
) -> None:
    from controlplane.topics.models import Topic
    from controlplane.topics.services import create_topic

    cluster = services.create_cluster(
        region, name="main", provisioner="static", broker_count=3, actor=ADMIN
    )
    tenant = make_tenant("acme", region=region)
    topic = create_topic(tenant, name="orders", partitions=3, replication_factor=2, actor=ADMIN)
    broker = cluster.brokers.get(broker_id=1)
    response = admin_client.post(f"/api/v1/brokers/{broker.pk}/decommission")
    assert response.status_code == 202, response.content
    assert response.json()["phase"] == "decommissioning"
    for row in Topic.objects.get(pk=topic.pk).assignments.all():
        assert 1 not in (row.target_replicas if 1 in row.replicas else row.replicas)
    again = admin_client.delete(f"/api/v1/brokers/{broker.pk}")  # the same, idempotent
    assert (again.status_code, again.json()["phase"]) == (202, "decommissioning")
    # The other two brokers hold every partition already: nowhere to move 2's replicas.
    other = cluster.brokers.get(broker_id=2)
    refused = admin_client.post(f"/api/v1/brokers/{other.pk}/decommission")
    assert refused.status_code == 409
    assert Broker.objects.get(pk=other.pk).phase == "pending"


def test_brokers_filter_by_phase(admin_client: APIClient, region: Region) -> None:
    cluster = services.create_cluster(
        region, name="main", provisioner="static", broker_count=2, actor=ADMIN
    )
    first = cluster.brokers.get(broker_id=1)
    services.set_broker_phase(first, BrokerPhase.UNREACHABLE, actor=ADMIN, reason="gone")
    listed = admin_client.get("/api/v1/brokers", {"phase": "unreachable"}).json()["results"]
    assert [(b["broker_id"], b["phase_reason"]) for b in listed] == [(1, "gone")]
    assert AuditEvent.objects.filter(action="broker.phase").count() == 1


def test_taking_over_a_region_bumps_its_controller_epoch(region: Region) -> None:
    assert services.take_over_region("eu-west", controller_id="a", actor=ADMIN) == 1
    assert services.take_over_region("eu-west", controller_id="b", actor=ADMIN) == 2
    assert not services.refresh_controller_seen("eu-west", epoch=1)
    assert services.refresh_controller_seen("eu-west", epoch=2)
    assert Region.objects.get(name="eu-west").controller_id == "b"
