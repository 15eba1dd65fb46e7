"""Consumer group pages on a real broker: the list sorted by lag, the detail (members,
positions, lag in records and seconds), and resetting a stopped group's offsets — a
preview that moves nothing, then the confirmation applying exactly that request
(checked with the SDK's Admin), refused with the API's message while a member is
active, forbidden to viewers; another tenant's group answers like a missing one."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from controlplane.core.models import AuditEvent
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from dataplane.client import Admin, Consumer, Producer, TopicPartition
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster, wait_until
from tests.web.pages.conftest import ConsoleFactory, unmasked

TOPIC = "acme.orders"
GROUP = "acme.billing"
CAUGHT_UP = "acme.audit"
URL = f"/console/t/acme/groups/{GROUP}/"
ROLES = ["viewer", "developer", "tenant-admin"]


def make_topic(tenant: Tenant, cluster: Cluster, name: str) -> None:
    Topic.objects.create(
        tenant=tenant, cluster=cluster, name=name.split(".", 1)[1], full_name=name,
        partitions=2, retention_ms=3_600_000, retention_bytes=2**30, status="ready",
    )  # fmt: skip


@pytest.fixture
def brokers(db: None, broker: BrokerProcess) -> BrokerProcess:
    """Tenants acme (topic acme.orders, 2 partitions of 10 records; group acme.billing
    committed at 4 and 10, group acme.audit caught up) and globex (group globex.secret)
    on one real broker."""
    cluster = register_static_cluster([broker])
    acme = make_tenant("acme", region=cluster.region)
    globex = make_tenant("globex", region=cluster.region)
    make_topic(acme, cluster, TOPIC)
    make_topic(globex, cluster, "globex.orders")
    with Admin(broker.address) as admin:
        admin.create_topic(TOPIC, 2)
        admin.create_topic("globex.orders", 2)
        with Producer(broker.address) as producer:
            for i in range(20):
                producer.send(TOPIC, b"%d" % i, partition=i % 2)
        admin.alter_group_offsets(
            GROUP, {TopicPartition(TOPIC, 0): 4, TopicPartition(TOPIC, 1): 10}
        )
        admin.alter_group_offsets(
            CAUGHT_UP, {TopicPartition(TOPIC, 0): 10, TopicPartition(TOPIC, 1): 10}
        )
        admin.alter_group_offsets("globex.secret", {TopicPartition("globex.orders", 0): 0})
    return broker


def committed(broker: BrokerProcess, group: str = GROUP) -> dict[int, int | None]:
    with Admin(broker.address) as admin:
        return {tp.partition: lag.committed for tp, lag in admin.group_lag(group).items()}


def table_rows(page: str, heading: str) -> list[list[str]]:
    body = page.split(f'id="{heading}"', 1)[1].split("</tbody>", 1)[0]
    rows = body.split("<tr>")[2:]
    return [
        [html.unescape(c.strip()) for c in re.findall(r"<td>(.*?)</td>", r, re.S)] for r in rows
    ]


def hidden_inputs(page: str) -> dict[str, str]:
    """The confirmation form's fields: exactly the previewed request."""
    form = page.split('id="reset-preview"', 1)[1].split("</form>", 1)[0]
    pairs = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form)
    return {name: html.unescape(value) for name, value in pairs if name != "csrfmiddlewaretoken"}


# -- reads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_the_list_sorted_by_lag_and_the_detail(
    role: str, brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": role})
    listing = client.get("/console/t/acme/groups/")
    assert listing.status_code == 200
    nav = listing.content.decode().split('aria-label="Sections"', 1)[1].split("</nav>", 1)[0]
    assert '<a href="/console/t/acme/groups/" aria-current="page">Consumer groups</a>' in nav
    rows = table_rows(listing.content.decode(), "groups")
    assert [row[1:4] for row in rows] == [["Empty", "0", "6"], ["Empty", "0", "0"]]
    assert GROUP in rows[0][0]
    assert CAUGHT_UP in rows[1][0]
    assert float(rows[0][4]) > 0
    assert rows[1][4] == "0.0"
    assert "globex" not in listing.content.decode()

    detail = client.get(URL)
    assert detail.status_code == 200
    page = detail.content.decode()
    positions = table_rows(page, "positions-heading")
    assert [row[:5] for row in positions] == [
        [TOPIC, "0", "4", "10", "6"],
        [TOPIC, "1", "10", "10", "0"],
    ]
    assert float(positions[0][5]) > 0
    assert positions[1][5] == "0.0"
    assert ('name="step"' in page) == (role != "viewer")  # the reset form
    assert broker_address_absent(page, brokers)


def broker_address_absent(page: str, broker: BrokerProcess) -> bool:
    return broker.address not in page and f":{broker.address.rsplit(':', 1)[1]}" not in page


def test_a_platform_admin_reads_and_may_reset(
    brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    client = console_for(platform_admin=True)
    assert GROUP in client.get("/console/t/acme/groups/").content.decode()
    assert 'name="step"' in client.get(URL).content.decode()


def test_the_detail_shows_members_with_their_assignments(
    brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    consumer = Consumer(
        brokers.address, group_id=GROUP, client_id="biller-1", enable_auto_commit=False
    )
    try:
        consumer.subscribe([TOPIC])
        wait_until(lambda: consumer.poll(timeout_ms=100) is not None and consumer.assignment())
        page = console_for(roles={"acme": "viewer"}).get(URL).content.decode()
        (member,) = table_rows(page, "members-heading")
        assert member[0] == "biller-1"
        assert member[3] == f"{TOPIC}/0, {TOPIC}/1"
    finally:
        consumer.close()


def test_another_tenants_group_answers_like_a_missing_one(
    brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "tenant-admin"})
    pairs = (
        ("/console/t/acme/groups/globex.secret/", "/console/t/acme/groups/acme.nosuch/"),
        ("/console/t/globex/groups/globex.secret/", "/console/t/nosuch/groups/nosuch.x/"),
    )
    for url, missing_url in pairs:
        response, missing = client.get(url), client.get(missing_url)
        assert response.status_code == missing.status_code == 404
        assert unmasked(response.content) == unmasked(missing.content)
        posted = client.post(url, {"step": "apply", "to": "latest"})
        assert posted.status_code == 404
    assert committed(brokers, "globex.secret") == {0: 0}


# -- reset ---------------------------------------------------------------------------------


def test_viewers_cannot_reset(brokers: BrokerProcess, console_for: ConsoleFactory) -> None:
    client = console_for(roles={"acme": "viewer"})
    for step in ("preview", "apply"):
        response = client.post(URL, {"step": step, "to": "earliest"})
        assert response.status_code == 403
    assert committed(brokers) == {0: 4, 1: 10}


def test_preview_moves_nothing_then_confirm_applies_exactly_it(
    brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    preview = client.post(
        URL, {"step": "preview", "to": "offset", "offset": "7", "topic": TOPIC, "partitions": "0"}
    )
    assert preview.status_code == 200
    page = preview.content.decode()
    assert table_rows(page, "reset-preview") == [[TOPIC, "0", "4", "7", "3 skipped"]]
    assert committed(brokers) == {0: 4, 1: 10}  # a preview moves nothing
    assert not AuditEvent.objects.filter(action="group.offsets.reset").exists()

    request = hidden_inputs(page)
    assert request == {
        "step": "apply",
        "to": "offset",
        "offset": "7",
        "topic": TOPIC,
        "partitions": "0",
    }
    applied = client.post(URL, request)
    assert applied.status_code == 302
    assert applied["Location"] == f"{URL}?reset=done"
    assert committed(brokers) == {0: 7, 1: 10}
    event = AuditEvent.objects.get(action="group.offsets.reset")
    assert (event.object_id, event.tenant_slug) == (GROUP, "acme")
    assert event.after == {"offsets": {f"{TOPIC}/0": 7}, "to": "offset"}
    assert "Offsets reset" in client.get(applied["Location"]).content.decode()


def test_earliest_over_every_committed_partition_reads_again(
    brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "tenant-admin"})
    page = client.post(URL, {"step": "preview", "to": "earliest"}).content.decode()
    assert table_rows(page, "reset-preview") == [
        [TOPIC, "0", "4", "0", "4 read again"],
        [TOPIC, "1", "10", "0", "10 read again"],
    ]
    assert client.post(URL, hidden_inputs(page)).status_code == 302
    assert committed(brokers) == {0: 0, 1: 0}


def test_a_timestamp_reset_takes_an_iso_time(
    brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    page = client.post(
        URL, {"step": "preview", "to": "timestamp", "timestamp": "2000-01-01T00:00:00Z"}
    ).content.decode()
    assert [row[3] for row in table_rows(page, "reset-preview")] == ["0", "0"]
    page = client.post(
        URL, {"step": "preview", "to": "timestamp", "timestamp": "2999-01-01T00:00:00+02:00"}
    ).content.decode()
    assert [row[3] for row in table_rows(page, "reset-preview")] == ["10", "10"]  # none after


def test_bad_input_shows_the_apis_messages_by_field(
    brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    for body, field in (
        ({"to": "timestamp"}, "timestamp"),
        ({"to": "timestamp", "timestamp": "yesterday"}, "timestamp"),
        ({"to": "offset"}, "offset"),
        ({"to": "sideways"}, "to"),
        ({"to": "latest", "partitions": "0"}, "topic"),
        ({"to": "latest", "topic": TOPIC, "partitions": "0, x"}, "partitions"),
        ({"to": "timestamp", "timestamp": "9" * 30}, "timestamp"),  # beyond int64
    ):
        response = client.post(URL, {"step": "preview", **body})
        assert response.status_code == 422, body
        page = response.content.decode()
        assert f'id="reset-{field}-errors"' in page, body
        assert 'id="reset-preview"' not in page
    response = client.post(
        URL, {"step": "apply", "to": "latest", "topic": TOPIC, "partitions": "5"}
    )
    assert response.status_code == 422
    assert "has partitions 0-1" in html.unescape(response.content.decode())
    assert committed(brokers) == {0: 4, 1: 10}


def test_reset_is_refused_with_the_apis_message_while_a_member_is_active(
    brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    consumer = Consumer(brokers.address, group_id=GROUP, enable_auto_commit=False)
    try:
        consumer.subscribe([TOPIC])
        wait_until(lambda: consumer.poll(timeout_ms=100) is not None and consumer.assignment())
        page = client.get(URL).content.decode()
        assert "Offsets move only while the group has no member" in page
        for step in ("preview", "apply"):
            refused = client.post(URL, {"step": step, "to": "earliest"})
            assert refused.status_code == 422
            text = html.unescape(refused.content.decode())
            assert f"group '{GROUP}' has 1 active member(s)" in text
            assert "stop its consumers first" in text
        assert committed(brokers) == {0: 4, 1: 10}
        assert not AuditEvent.objects.filter(action="group.offsets.reset").exists()
    finally:
        consumer.close()


def test_a_script_in_a_group_id_is_escaped(
    brokers: BrokerProcess, console_for: ConsoleFactory
) -> None:
    hostile = "acme.<script>alert(1)</script>"
    with Admin(brokers.address) as admin:
        admin.alter_group_offsets(hostile, {TopicPartition(TOPIC, 0): 1})
    client: Client = console_for(roles={"acme": "developer"})
    listing = client.get("/console/t/acme/groups/").content.decode()
    assert "<script>alert" not in listing
    assert "acme.&lt;script&gt;alert(1)&lt;/script&gt;" in listing
    link = re.search(r'href="(/console/t/acme/groups/acme[^"]*script[^"]*)"', listing)
    assert link is not None
    detail = client.get(html.unescape(link.group(1)))
    assert detail.status_code == 200
    page = detail.content.decode()
    assert "<script>alert" not in page
    preview = client.post(html.unescape(link.group(1)), {"step": "preview", "to": "earliest"})
    assert preview.status_code == 200
    assert "<script>alert" not in preview.content.decode()
