"""The Transactions page on a real broker: a tenant's transactional ids with their open
transaction (partitions, age) and pending half messages; tenant admins abort a hanging
transaction and decide a half message with its buttons (audited, the API's refusals),
viewers see no buttons; another tenant's names answer like missing ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controlplane.core.models import AuditEvent
from controlplane.regions.models import Cluster
from controlplane.topics.models import Topic
from dataplane.client import Admin, Producer
from dataplane.client.halves import HalfMessage
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster
from tests.web.pages.conftest import ConsoleFactory

URL = "/console/t/acme/transactions/"


@pytest.fixture
def open_work(db: None, broker: BrokerProcess) -> Iterator[tuple[Producer, HalfMessage]]:
    """acme's transactional producer acme.loader with a transaction open on
    acme.orders-0, and a half message of acme.payments waiting."""
    cluster: Cluster = register_static_cluster([broker])
    acme = make_tenant("acme", region=cluster.region)
    make_tenant("globex", region=cluster.region)
    Topic.objects.create(
        tenant=acme, cluster=cluster, name="orders", full_name="acme.orders", partitions=1,
        retention_ms=3_600_000, retention_bytes=2**30, status="ready",
    )  # fmt: skip
    with Admin(broker.address) as admin:
        admin.create_topic("acme.orders", 1)
    producer = Producer(broker.address, transactional_id="acme.loader", linger_ms=1)
    halves = Producer(
        broker.address, producer_group="acme.payments", half_check_interval_ms=600_000
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("acme.orders", b"open", partition=0)
        producer.flush()
        yield producer, halves.send_half("acme.orders", b"half", partition=0)
    finally:
        producer.close(1)
        halves.close(1)


def test_a_viewer_sees_open_transactions_and_pending_half_messages_without_buttons(
    open_work: tuple[Producer, HalfMessage], console_for: ConsoleFactory
) -> None:
    _, half = open_work
    page = console_for(roles={"acme": "viewer"}).get(URL)
    assert page.status_code == 200
    text = page.content.decode()
    assert "acme.loader" in text
    assert "acme.orders/0" in text
    assert half.half_id in text
    assert "Abort" not in text
    assert "Roll back" not in text


def test_a_tenant_admin_aborts_and_decides_with_the_buttons(
    open_work: tuple[Producer, HalfMessage], console_for: ConsoleFactory
) -> None:
    _, half = open_work
    admin = console_for(roles={"acme": "tenant-admin"})
    shown = admin.get(URL).content.decode()
    assert 'aria-label="Abort acme.loader"' in shown
    form = {"tenant": "acme", "action": "abort", "transactional_id": "acme.loader"}
    done = admin.post(URL, form)
    assert done.status_code == 302
    assert done["Location"].endswith("?done=aborted")
    assert AuditEvent.objects.filter(action="transaction.abort", object_id="acme.loader").exists()
    again = admin.post(URL, form)  # no transaction open now: the API's refusal, shown
    assert again.status_code == 409
    assert "no open transaction" in again.content.decode()
    decide = {"tenant": "acme", "action": "rollback", "producer_group": "acme.payments"}
    assert admin.post(URL, {**decide, "half_id": half.half_id}).status_code == 302
    after = admin.get(URL).content.decode()
    assert "rolled back" in after
    assert AuditEvent.objects.filter(action="half_message.rollback").count() == 1
    stranger = {**form, "transactional_id": "globex.loader"}
    assert admin.post(URL, stranger).status_code == 404
    assert console_for(roles={"acme": "developer"}).post(URL, form).status_code == 403
