"""Tiered storage on the topic pages: the detail shows a topic's bytes on the brokers'
disks and in the object store; the config form turns tiered storage on where the
cluster has a store and shows the API's refusals on the field; the create and config
forms set the segment settings (when a segment is sealed, hence uploaded); no console page shows a
cluster's store options."""

from __future__ import annotations

from django.test import Client

from controlplane.core.actors import Actor
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics import services
from controlplane.topics.models import PartitionAssignment, Topic
from tests.web.pages.conftest import ConsoleFactory
from tests.web.pages.test_topics import field_errors

SYSTEM = Actor.system("test")
SECRET = "store-secret-6620"
CONFIG_URL = "/console/t/acme/topics/acme.orders/config/"


def _with_store(cluster: Cluster) -> None:
    cluster.remote_store_uri = "s3://tier/local"
    cluster.remote_store_options = {"key": "k", "secret": SECRET}
    cluster.save()


def _developer(console_for: ConsoleFactory) -> Client:
    client: Client = console_for(roles={"acme": "developer"})
    return client


def test_the_detail_shows_local_and_remote_bytes(
    cluster_rows: Cluster, acme: Tenant, console_for: ConsoleFactory
) -> None:
    _with_store(cluster_rows)
    topic = services.create_topic(acme, name="orders", partitions=2, remote_storage=True,
                                  local_retention_ms=60_000, actor=SYSTEM)  # fmt: skip
    PartitionAssignment.objects.filter(topic=topic, partition=0).update(
        size_bytes=2048, remote_bytes=3 * 2**20
    )
    PartitionAssignment.objects.filter(topic=topic, partition=1).update(
        size_bytes=2048, remote_bytes=2**20
    )

    page = _developer(console_for).get("/console/t/acme/topics/acme.orders/").content.decode()

    assert "<strong>4.0\xa0KB</strong> on the brokers' disks" in page
    assert "<strong>4.0\xa0MB</strong> in the object store" in page
    assert "Tiered storage</dt><dd>on</dd>" in page
    assert "Local retention</dt><dd>60000 ms</dd>" in page
    assert SECRET not in page


def test_a_developer_turns_tiered_storage_on(
    cluster_rows: Cluster, acme: Tenant, console_for: ConsoleFactory
) -> None:
    _with_store(cluster_rows)
    services.create_topic(acme, name="orders", partitions=1, actor=SYSTEM)

    response = _developer(console_for).post(
        CONFIG_URL, {"remote_storage": "true", "local_retention_bytes": "1048576"}
    )

    assert response.status_code == 302
    topic = Topic.objects.get(full_name="acme.orders")
    assert (topic.remote_storage, topic.local_retention_bytes) == (True, 2**20)


def test_refusals_show_on_the_field(acme: Tenant, console_for: ConsoleFactory) -> None:
    services.create_topic(acme, name="orders", partitions=1, actor=SYSTEM)
    client = _developer(console_for)

    no_store = client.post(CONFIG_URL, {"remote_storage": "true"})
    assert no_store.status_code == 422
    assert (
        "no object store" in field_errors(no_store.content.decode(), "remote_storage", "config-")[0]
    )

    too_long = client.post(CONFIG_URL, {"retention_ms": "3600000", "local_retention_ms": "7200000"})
    assert too_long.status_code == 422
    assert field_errors(too_long.content.decode(), "local_retention_ms", "config-")


def test_the_create_form_sets_the_segment_settings(
    cluster_rows: Cluster, acme: Tenant, console_for: ConsoleFactory
) -> None:
    _with_store(cluster_rows)
    client = _developer(console_for)
    form = client.get("/console/t/acme/topics/new/").content.decode()
    assert 'name="max_segment_bytes"' in form
    assert 'name="segment_ms"' in form

    response = client.post(
        "/console/t/acme/topics/new/",
        {"name": "history", "partitions": "1", "remote_storage": "true",
         "max_segment_bytes": "1048576", "segment_ms": "60000"},
    )  # fmt: skip

    assert response.status_code == 302
    topic = Topic.objects.get(full_name="acme.history")
    assert (topic.remote_storage, topic.max_segment_bytes, topic.segment_ms) == (
        True,
        2**20,
        60_000,
    )
    page = client.get("/console/t/acme/topics/acme.history/").content.decode()
    assert "Segments sealed at</dt><dd>1.0\xa0MB (1048576 bytes) or 60000 ms</dd>" in page


def test_the_config_form_changes_segments_and_refuses_on_the_field(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    services.create_topic(acme, name="orders", partitions=1, actor=SYSTEM)
    client = _developer(console_for)

    changed = client.post(CONFIG_URL, {"segment_ms": "3600000"})
    assert changed.status_code == 302
    assert Topic.objects.get(full_name="acme.orders").segment_ms == 3_600_000

    tiny = client.post(CONFIG_URL, {"max_segment_bytes": "1024"})
    assert tiny.status_code == 422
    assert field_errors(tiny.content.decode(), "max_segment_bytes", "config-")
    assert Topic.objects.get(full_name="acme.orders").max_segment_bytes == 2**30


def test_turning_it_off_is_refused_on_the_field(
    cluster_rows: Cluster, acme: Tenant, console_for: ConsoleFactory
) -> None:
    _with_store(cluster_rows)
    services.create_topic(acme, name="orders", partitions=1, remote_storage=True, actor=SYSTEM)

    response = _developer(console_for).post(CONFIG_URL, {"remote_storage": "false"})

    assert response.status_code == 422
    assert (
        "cannot be turned off"
        in field_errors(response.content.decode(), "remote_storage", "config-")[0]
    )


def test_no_console_page_shows_a_clusters_store_options(
    cluster_rows: Cluster, acme: Tenant, console_for: ConsoleFactory
) -> None:
    _with_store(cluster_rows)
    admin = console_for(platform_admin=True)
    for url in ("/console/platform/", "/console/platform/tenants/", "/console/t/acme/"):
        response = admin.get(url)
        assert response.status_code == 200, url
        assert SECRET not in response.content.decode()
    overview = admin.get("/console/platform/").content.decode()
    assert "object store s3://tier/local, options set" in overview
