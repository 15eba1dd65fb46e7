"""The transactions API on a real broker: a tenant's transactional ids with their open
transaction's partitions and age, aborting a hanging one (tenant admins; audited; its
producer fenced; nothing of it visible; refused once none is open), half messages listed
and decided by an operator, and another tenant's answering as missing ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from rest_framework.test import APIClient

from controlplane.core.models import AuditEvent
from controlplane.regions.models import Cluster
from controlplane.topics.models import Topic
from dataplane.client import Admin, Consumer, MeridianError, Producer, TopicPartition
from dataplane.errors import ErrorCode
from tests.controlplane.api_base import assert_error
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster, wait_until

TOPIC = "acme.orders"
TID = "acme.loader"
URL = f"/api/v1/transactions/{TID}"


@pytest.fixture
def hanging(db: None, broker: BrokerProcess) -> Iterator[Producer]:
    """Tenant acme with topic acme.orders (2 partitions) on a real broker, a
    transactional producer acme.loader whose transaction is open on both partitions, and
    tenant globex with one of its own."""
    cluster: Cluster = register_static_cluster([broker])
    for slug in ("acme", "globex"):
        tenant = make_tenant(slug)
        Topic.objects.create(
            tenant=tenant, cluster=cluster, name="orders", full_name=f"{slug}.orders",
            partitions=2, retention_ms=3_600_000, retention_bytes=2**30, status="ready",
        )  # fmt: skip
        with Admin(broker.address) as admin:
            admin.create_topic(f"{slug}.orders", 2)
    globex = Producer(broker.address, transactional_id="globex.loader", linger_ms=1)
    producer = Producer(broker.address, transactional_id=TID, linger_ms=1)
    try:
        for p, topic in ((globex, "globex.orders"), (producer, TOPIC)):
            p.init_transactions()
            p.begin_transaction()
            p.send(topic, b"one", partition=0)
            p.send(topic, b"two", partition=1)
            p.flush()
        yield producer
    finally:
        producer.close(1)
        globex.close(1)


def test_members_see_their_tenants_transactions_with_partitions_and_age(
    hanging: Producer, client_for: Callable[..., APIClient]
) -> None:
    viewer = client_for(roles={"acme": "viewer"})
    listed = viewer.get("/api/v1/transactions").json()["results"]
    assert [(t["transactional_id"], t["state"]) for t in listed] == [(TID, "ongoing")]
    body = viewer.get(URL).json()
    assert {(p["topic"], p["partition"]) for p in body["partitions"]} == {(TOPIC, 0), (TOPIC, 1)}
    assert body["age_seconds"] >= 0
    assert body["started_ms"] > 0
    wait_until(lambda: viewer.get(URL).json()["age_seconds"] > body["age_seconds"])
    # another tenant's transactional id answers as a missing one
    assert_error(viewer.get("/api/v1/transactions/globex.loader"), 404, "not_found")
    assert_error(viewer.get("/api/v1/transactions/acme.never"), 404, "not_found")
    ongoing = viewer.get("/api/v1/transactions?state=ongoing").json()["results"]
    assert [t["transactional_id"] for t in ongoing] == [TID]
    assert viewer.get("/api/v1/transactions?state=complete_abort").json()["results"] == []


def test_a_tenant_admin_aborts_a_hanging_transaction_and_fences_its_producer(
    hanging: Producer, broker: BrokerProcess, client_for: Callable[..., APIClient]
) -> None:
    developer = client_for(roles={"acme": "developer"})
    assert_error(developer.post(f"{URL}/abort"), 403, "permission_denied")
    admin = client_for(roles={"acme": "tenant-admin"})
    assert_error(admin.post("/api/v1/transactions/globex.loader/abort"), 404, "not_found")
    aborted = admin.post(f"{URL}/abort")
    assert aborted.status_code == 200, aborted.content
    assert aborted.json()["state"] in ("prepare_abort", "complete_abort")
    event = AuditEvent.objects.get(action="transaction.abort")
    assert (event.object_id, event.tenant_slug, event.before["state"]) == (TID, "acme", "ongoing")
    assert_error(admin.post(f"{URL}/abort"), 409, "transaction_not_open")
    with pytest.raises(MeridianError) as fenced:
        hanging.commit_transaction()
    assert fenced.value.code == ErrorCode.PRODUCER_FENCED
    reader = Consumer(
        broker.address, isolation_level="read_committed", auto_offset_reset="earliest"
    )
    try:
        reader.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        reader.seek_to_beginning()
        assert reader.poll(timeout_ms=1000) == []  # nothing of it is visible
    finally:
        reader.close()


def test_an_operator_decides_a_pending_half_message(
    hanging: Producer, broker: BrokerProcess, client_for: Callable[..., APIClient]
) -> None:
    with Producer(
        broker.address, producer_group="acme.payments", half_check_interval_ms=600_000
    ) as p:
        half = p.send_half(TOPIC, b"half", key=b"order-9", partition=0)
    admin = client_for(roles={"acme": "tenant-admin"})
    listed = admin.get("/api/v1/half-messages").json()["results"]
    assert [(h["producer_group"], h["half_id"], h["state"]) for h in listed] == [
        ("acme.payments", half.half_id, "ongoing")
    ]
    assert (
        client_for(roles={"globex": "tenant-admin"}).get("/api/v1/half-messages").json()["results"]
        == []
    )
    url = f"/api/v1/half-messages/acme.payments/{half.half_id}/resolve"
    assert_error(admin.post(url, {"outcome": "maybe"}, format="json"), 400, "invalid")
    done = admin.post(url, {"outcome": "commit"}, format="json")
    assert done.status_code == 200, done.content
    assert done.json()["resolved_by"] == "operator"
    assert AuditEvent.objects.filter(action="half_message.commit").count() == 1
    assert_error(
        admin.post(url, {"outcome": "rollback"}, format="json"), 409, "transaction_not_open"
    )
    other = client_for(roles={"globex": "tenant-admin"})
    assert_error(other.post(url, {"outcome": "rollback"}, format="json"), 404, "not_found")


def test_a_tenant_admin_aborts_a_producers_transaction_on_one_partition(
    hanging: Producer, broker: BrokerProcess, client_for: Callable[..., APIClient]
) -> None:
    """Kafka's kafka-transactions --abort: the partition's producers are listed at its
    leader; a tenant admin writes an abort marker for the one hanging there (audited),
    and the partition's last stable offset moves past it; another tenant's partition
    answers as a missing one."""
    url = f"/api/v1/partition-producers/{TOPIC}/0"
    viewer = client_for(roles={"acme": "viewer"})
    listed = viewer.get(url)
    assert listed.status_code == 200, listed.content
    (open_one,) = [p for p in listed.json() if p["txn_first_offset"] >= 0]
    assert_error(viewer.get("/api/v1/partition-producers/globex.orders/0"), 404, "not_found")
    assert_error(viewer.get("/api/v1/partition-producers/acme.never/0"), 404, "not_found")
    abort = f"{url}/{open_one['producer_id']}/abort"
    assert_error(viewer.post(abort), 403, "permission_denied")
    admin = client_for(roles={"acme": "tenant-admin"})
    done = admin.post(abort)
    assert done.status_code == 200, done.content
    assert done.json()["txn_first_offset"] == open_one["txn_first_offset"]
    event = AuditEvent.objects.get(action="transaction.abort_producer")
    assert (event.object_id, event.tenant_slug) == (f"{TOPIC}/0", "acme")
    tp = TopicPartition(TOPIC, 0)
    with Admin(broker.address) as reader:
        stable = reader.list_offsets({tp: "latest"}, read_committed=True)[tp][0]
        assert stable == reader.list_offsets({tp: "latest"})[tp][0]
    assert_error(admin.post(abort), 409, "transaction_not_open")
