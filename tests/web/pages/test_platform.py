"""The platform administrator's pages: regions/clusters/brokers with decommission and
drift findings, tenants with create and quotas. Everyone else gets the 404 of a
missing page."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent
from controlplane.quotas.models import Quota
from controlplane.regions.models import Broker, Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics.models import DriftFinding, PartitionAssignment
from controlplane.topics.services import create_topic
from tests.web.pages.conftest import ConsoleFactory
from tests.web.pages.test_topics import field_errors

OVERVIEW = "/console/platform/"
TENANTS = "/console/platform/tenants/"
CREATE = "/console/platform/tenants/new/"
PAGES = [OVERVIEW, TENANTS, "/console/platform/tenants/acme/"]


ADMIN = Actor.system("test")


def broker_cells(page: str, broker: Broker) -> list[str]:
    """The text of the broker's row's first eight cells (before its form)."""
    match = re.search(rf'<tr id="broker-{broker.pk}">(.*?)</tr>', page, re.S)
    assert match is not None
    cells = re.findall(r"<td>(.*?)</td>", match.group(1), re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells[:8]]


def decommission_url(broker: Broker) -> str:
    return f"/console/platform/brokers/{broker.pk}/decommission/"


@pytest.mark.parametrize("url", PAGES)
def test_each_page_renders_for_a_platform_admin(
    url: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    response = console_for(platform_admin=True).get(url)
    assert response.status_code == 200
    assert 'href="/console/platform/">Platform</a>' in response.content.decode()


@pytest.mark.parametrize("url", [*PAGES, "/console/platform/tenants/nope/"])
def test_anyone_else_gets_the_404_of_a_missing_page(
    url: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "tenant-admin"})
    missing = client.get("/console/no-such-page/")
    response = client.get(url)
    assert response.status_code == 404
    assert response.content == missing.content
    assert client.post(url, {"max_topics": "1", "confirm": "c1/1"}).status_code == 404
    assert client.post(CREATE, {"slug": "x", "name": "x"}).status_code == 404
    assert not Tenant.objects.filter(slug="x").exists()


def test_no_write_reaches_a_service_for_anyone_else(
    cluster_rows: Cluster, acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "tenant-admin"})
    broker = cluster_rows.brokers.get(broker_id=1)
    assert client.post(decommission_url(broker), {"confirm": "c1/1"}).status_code == 404
    assert client.post(PAGES[2], {"max_topics": "1"}).status_code == 404
    broker.refresh_from_db()
    assert broker.phase == "ready"
    assert Quota.objects.get(tenant=acme).max_topics != 1


def test_tenant_pages_show_no_platform_link(acme: Tenant, console_for: ConsoleFactory) -> None:
    page = console_for(roles={"acme": "tenant-admin"}).get("/console/t/acme/").content.decode()
    assert "/console/platform/" not in page


def test_the_overview_shows_brokers_and_open_drift(
    cluster_rows: Cluster, console_for: ConsoleFactory
) -> None:
    broker = cluster_rows.brokers.get(broker_id=2)
    now = timezone.now()
    DriftFinding.objects.create(
        broker=broker, topic_name="acme.orders", partition=3, kind="missing",
        detail="not on the broker", last_seen_at=now,
    )  # fmt: skip
    DriftFinding.objects.create(
        broker=broker, topic_name="acme.gone", partition=0, kind="missing",
        detail="old", last_seen_at=now, resolved_at=now,
    )  # fmt: skip
    page = console_for(platform_admin=True).get(OVERVIEW).content.decode()
    assert "Region local" in page
    assert "Cluster c1" in page
    assert "127.0.0.1:40002" in page  # operator-only page: addresses are fine
    assert "acme.orders" in page
    assert "not on the broker" in page
    assert "acme.gone" not in page
    assert "1 open drift finding." in page


def test_brokers_show_their_kafka_address_beside_the_grpc_one(
    cluster_rows: Cluster, console_for: ConsoleFactory
) -> None:
    cluster_rows.brokers.filter(broker_id=1).update(kafka_port=41001)
    page = console_for(platform_admin=True).get(OVERVIEW).content.decode()
    assert '<th scope="col">gRPC address</th><th scope="col">Kafka address</th>' in page
    one, two = (cluster_rows.brokers.get(broker_id=i) for i in (1, 2))
    assert broker_cells(page, one)[1:3] == ["127.0.0.1:40001", "127.0.0.1:41001"]
    assert broker_cells(page, two)[1:3] == ["127.0.0.1:40002", "—"]  # no Kafka listener


def test_decommission_needs_the_broker_typed(
    cluster_rows: Cluster, console_for: ConsoleFactory
) -> None:
    client = console_for(platform_admin=True)
    broker = cluster_rows.brokers.get(broker_id=2)
    response = client.post(decommission_url(broker), {"confirm": "c1/3"})
    assert response.status_code == 422
    assert field_errors(response.content.decode(), f"decommission-{broker.pk}-confirm")
    broker.refresh_from_db()
    assert broker.phase == "ready"

    response = client.post(decommission_url(broker), {"confirm": "c1/2"})
    assert response.status_code == 302
    broker.refresh_from_db()
    assert broker.phase == "decommissioning"
    assert AuditEvent.objects.filter(object_id=str(broker.pk)).exists()


def test_create_a_tenant_shows_the_apis_error_then_succeeds(
    cluster_rows: Cluster, console_for: ConsoleFactory
) -> None:
    client = console_for(platform_admin=True)
    response = client.post(CREATE, {"slug": "", "name": "Initech"})
    assert response.status_code == 422
    page = response.content.decode()
    assert field_errors(page, "tenant-slug")
    assert 'value="Initech"' in page  # nothing typed is lost
    response = client.post(CREATE, {"slug": "initech", "name": "Initech", "home_region": "local"})
    assert response.status_code == 302
    assert response["Location"] == "/console/platform/tenants/initech/"
    tenant = Tenant.objects.get(slug="initech")
    assert tenant.home_region == cluster_rows.region
    assert AuditEvent.objects.filter(action="tenant.create").exists()
    page = client.get(TENANTS).content.decode()
    assert "initech" in page


def test_quota_change_is_validated_and_audited(acme: Tenant, console_for: ConsoleFactory) -> None:
    client = console_for(platform_admin=True)
    url = "/console/platform/tenants/acme/"
    response = client.post(url, {"max_topics": "-1"})
    assert response.status_code == 422
    assert field_errors(response.content.decode(), "quota-max_topics")
    response = client.post(url, {"max_topics": "77"})
    assert response.status_code == 302
    assert Quota.objects.get(tenant=acme).max_topics == 77
    assert AuditEvent.objects.filter(action="quota.update").exists()


def test_brokers_show_partitions_led_and_hosted_and_bytes(
    cluster_rows: Cluster, acme: Tenant, console_for: ConsoleFactory
) -> None:
    topic = create_topic(acme, name="orders", partitions=2, replication_factor=3, actor=ADMIN)
    one = cluster_rows.brokers.get(broker_id=1)
    PartitionAssignment.objects.filter(topic=topic).update(leader=one, size_bytes=2048)
    page = console_for(platform_admin=True).get(OVERVIEW).content.decode()
    cells = broker_cells(page, one)
    assert cells[1] == "127.0.0.1:40001"
    assert cells[5:8] == ["2", "2", "4.0\xa0KB"]
    assert broker_cells(page, cluster_rows.brokers.get(broker_id=3))[5:7] == ["0", "2"]


def test_a_decommission_the_service_refuses_shows_its_message(
    cluster_rows: Cluster, acme: Tenant, console_for: ConsoleFactory
) -> None:
    create_topic(acme, name="orders", partitions=1, replication_factor=3, actor=ADMIN)
    broker = cluster_rows.brokers.get(broker_id=1)
    response = console_for(platform_admin=True).post(decommission_url(broker), {"confirm": "c1/1"})
    assert response.status_code == 422
    assert "every other broker already holds it" in response.content.decode()
    broker.refresh_from_db()
    assert broker.phase == "ready"


def test_the_tenant_list_pages_through_many_tenants(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    Tenant.objects.bulk_create(
        [Tenant(slug=f"t{n:03d}", name=f"T{n}", status="ready") for n in range(60)]
    )
    client = console_for(platform_admin=True)
    first = client.get(TENANTS).content.decode()
    assert "61 tenants." in first
    assert "Page 1 of 2" in first
    assert ">t048<" in first
    assert ">t049<" not in first
    second = client.get(TENANTS + "?page=2").content.decode()
    assert ">t049<" in second
    assert ">acme<" not in second
