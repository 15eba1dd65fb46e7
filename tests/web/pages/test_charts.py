"""The console's charts on the real Postgres, from history written through the metrics
service: the ``metrics.json`` endpoints (every role, both ranges, an unknown range a
400, series with no history, another tenant's topic or group a 404 like a missing one),
and the pages embedding each chart's data with its figures as a table."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from django.template.loader import render_to_string
from django.test import Client
from rest_framework.test import APIClient

from controlplane.accounts.identity import LocalIdentity
from controlplane.core.actors import Actor
from controlplane.metrics.models import Series
from controlplane.regions.models import Cluster
from controlplane.tenants.lifecycle import deprovision_tenant
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import delete_tenant
from controlplane.topics.models import Topic
from dataplane.client import Admin, Producer, TopicPartition
from tests.controlplane.conftest import token_for
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster
from tests.web.history import seed_history
from tests.web.pages.conftest import ConsoleFactory

ROLES = ["viewer", "developer", "tenant-admin"]
OPERATOR = Actor.system("tests")


def make_topic(tenant: Tenant, cluster: Cluster, full_name: str) -> None:
    Topic.objects.create(
        tenant=tenant, cluster=cluster, name=full_name.split(".", 1)[1], full_name=full_name,
        partitions=1, retention_ms=3_600_000, retention_bytes=2**30, status="ready",
    )  # fmt: skip


@pytest.fixture
def history(acme: Tenant, globex: Tenant, cluster_rows: Cluster) -> None:
    """acme.orders busy (50 records/s, consumed by acme.billing), acme.audit quiet
    (2 records/s), acme.idle never produced to; globex.secret busy, consumed by
    globex.reader; over the last 10 minutes."""
    for tenant, name in [(acme, "acme.orders"), (acme, "acme.audit"), (acme, "acme.idle"),
                         (globex, "globex.secret")]:  # fmt: skip
        make_topic(tenant, cluster_rows, name)
    seed_history(
        {"acme.orders": 50, "acme.audit": 2, "globex.secret": 80},
        {"acme.billing": "acme.orders", "globex.reader": "globex.secret"},
        minutes=10,
    )


def get_json(client: Client, url: str) -> tuple[int, Any]:
    response = client.get(url)
    body = json.loads(response.content) if response["Content-Type"] == "application/json" else None
    return response.status_code, body


def charts_by_id(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {chart["id"]: chart for chart in body["charts"]}


def known(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("range_key", ["1h", "1d"])
def test_a_topic_answers_its_produce_and_consume_rates(
    role: str, range_key: str, history: None, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": role})
    status, body = get_json(
        client, f"/console/t/acme/topics/acme.orders/metrics.json?range={range_key}"
    )
    assert status == 200
    assert body["range"] == range_key
    charts = charts_by_id(body)
    assert set(charts) == {"produce-records", "produce-bytes", "consume-records"}
    for chart in charts.values():
        assert len(chart["x"]) == len(chart["series"][0]["values"]) > 0
    produced = known(charts["produce-records"]["series"][0]["values"])
    consumed = known(charts["consume-records"]["series"][0]["values"])
    assert max(produced) > 25  # around 50 records/s
    assert 0 < max(consumed) < max(produced)  # the group reads about half
    assert max(known(charts["produce-bytes"]["series"][0]["values"])) == pytest.approx(
        100 * max(produced)
    )


def test_the_hour_has_10_second_points_and_the_day_coarser_ones(
    history: None, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "viewer"})
    hour = get_json(client, "/console/t/acme/topics/acme.orders/metrics.json?range=1h")[1]
    day = get_json(client, "/console/t/acme/topics/acme.orders/metrics.json?range=1d")[1]
    hour_x, day_x = hour["charts"][0]["x"], day["charts"][0]["x"]
    assert {b - a for a, b in itertools.pairwise(hour_x)} == {10}
    assert min(b - a for a, b in itertools.pairwise(day_x)) >= 60
    assert day_x[-1] - day_x[0] > 20 * 3600


def test_an_unknown_range_is_a_400_on_the_endpoint_and_the_default_on_the_page(
    history: None, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "viewer"})
    status, body = get_json(client, "/console/t/acme/topics/acme.orders/metrics.json?range=1y")
    assert status == 400
    assert body["code"] == "invalid_range"
    page = client.get("/console/t/acme/topics/acme.orders/?range=1y")
    assert page.status_code == 200
    assert "Produce rate (records/s), last hour" in page.content.decode()


def test_a_topic_without_history_answers_no_values(
    history: None, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "viewer"})
    status, body = get_json(client, "/console/t/acme/topics/acme.idle/metrics.json")
    assert status == 200
    for chart in body["charts"]:
        # Measured instants answer 0 (idle), the rest of the hour null: nothing above 0.
        assert not any(known(chart["series"][0]["values"]))
    page = client.get("/console/t/acme/topics/acme.idle/").content.decode()
    assert "Nothing recorded in the last hour." in page
    assert 'type="application/json"' not in page


@pytest.mark.parametrize(
    "url",
    [
        "/console/t/acme/topics/globex.secret/metrics.json",  # another tenant's, by its name
        "/console/t/globex/topics/globex.secret/metrics.json",  # a tenant without a role
        "/console/t/acme/topics/acme.nosuch/metrics.json",
        "/console/t/acme/groups/globex.reader/metrics.json",
        "/console/t/globex/groups/globex.reader/metrics.json",
        "/console/t/globex/metrics.json",
    ],
)
def test_another_tenants_history_is_a_404_like_a_missing_one(
    url: str, history: None, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "tenant-admin"})
    missing = client.get("/console/t/acme/topics/acme.nosuch/metrics.json")
    response = client.get(url)
    assert response.status_code == missing.status_code == 404
    assert b"globex" not in response.content


def test_a_caller_with_roles_in_both_tenants_sees_each_under_its_own(
    history: None, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "viewer", "globex": "viewer"})
    assert client.get("/console/t/acme/topics/globex.secret/metrics.json").status_code == 404
    assert client.get("/console/t/acme/groups/globex.reader/metrics.json").status_code == 404
    assert client.get("/console/t/globex/groups/globex.reader/metrics.json").status_code == 200


def test_signed_out_callers_are_sent_to_sign_in(history: None) -> None:
    response = Client().get("/console/t/acme/topics/acme.orders/metrics.json")
    assert response.status_code == 302
    assert "/console/auth/" in response["Location"] or "login" in response["Location"]


@pytest.mark.parametrize("role", ROLES)
def test_a_group_answers_its_lag_per_topic(
    role: str, history: None, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": role})
    status, body = get_json(client, "/console/t/acme/groups/acme.billing/metrics.json?range=1h")
    assert status == 200
    charts = charts_by_id(body)
    # Brokers do not report lag in seconds: no chart for it.
    assert set(charts) == {"lag-records"}
    [line] = charts["lag-records"]["series"]
    assert line["label"] == "acme.orders"
    lag = known(line["values"])
    assert lag[-1] > lag[1] > 0  # the lag grows


def test_a_group_never_seen_answers_no_charts(history: None, console_for: ConsoleFactory) -> None:
    client = console_for(roles={"acme": "viewer"})
    status, body = get_json(client, "/console/t/acme/groups/acme.new/metrics.json")
    assert status == 200
    assert body == {"range": "1h", "charts": []}


@pytest.mark.parametrize("range_key", ["1h", "1d"])
def test_the_dashboard_charts_the_tenants_busiest_topics(
    range_key: str, history: None, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "viewer"})
    status, body = get_json(client, f"/console/t/acme/metrics.json?range={range_key}")
    assert status == 200
    charts = charts_by_id(body)
    produce, consume = charts["busiest-produce"], charts["busiest-consume"]
    # Busiest first; a topic never produced to is left out; another tenant's never in.
    assert [s["label"] for s in produce["series"]] == ["acme.orders", "acme.audit"]
    assert [s["label"] for s in consume["series"]] == ["acme.orders", "acme.audit"]
    assert max(known(consume["series"][0]["values"])) > 0
    assert not any(known(consume["series"][1]["values"]))  # nobody reads acme.audit


def test_the_dashboard_page_embeds_the_charts_and_their_figures(
    history: None, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "viewer"})
    page = client.get("/console/t/acme/?range=1d").content.decode()
    assert '<a href="?range=1d#rates-heading" aria-current="true">Last day</a>' in page
    assert '<a href="?range=1h#rates-heading">Last hour</a>' in page
    block = re.search(
        r'<script id="busiest-produce-data" type="application/json">(.*?)</script>', page, re.S
    )
    assert block is not None
    assert json.loads(block.group(1))["range"] == "1d"
    figures = page.split('id="busiest-produce"', 1)[1].split("</table>", 1)[0]
    assert re.search(r'<th scope="row">acme.orders</th><td>[\d.,]+/s</td>', figures)
    assert "globex" not in page
    assert re.search(r'<script src="[^"]*/web/charts.js" defer>', page)


def test_the_dashboard_says_when_nothing_was_produced(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    page = console_for(roles={"acme": "viewer"}).get("/console/t/acme/").content.decode()
    assert "No records produced in the last hour." in page
    assert "No consumer group is behind." in page


def test_the_group_page_without_history_says_so(acme: Tenant, console_for: ConsoleFactory) -> None:
    # The page itself needs brokers (tests/web/pages/test_groups.py); the charts part
    # is the endpoint's, checked above. Here: the template's words for no history.
    text = render_to_string(
        "web/groups/detail.html",
        {"group": {"group_id": "acme.new", "members": [], "partitions": []}, "charts": None,
         "tenant": acme, "console": None},
    )  # fmt: skip
    assert "No history yet" in text


@pytest.fixture
def lagging(db: None, broker: BrokerProcess) -> BrokerProcess:
    """acme.orders (2 partitions, 10 records each) on a real broker: acme.billing 6
    records behind, acme.audit caught up; globex.secret behind on globex's topic."""
    cluster = register_static_cluster([broker])
    acme = make_tenant("acme", region=cluster.region)
    globex = make_tenant("globex", region=cluster.region)
    make_topic(acme, cluster, "acme.orders")
    make_topic(globex, cluster, "globex.orders")
    with Admin(broker.address) as admin, Producer(broker.address) as producer:
        for name in ("acme.orders", "globex.orders"):
            admin.create_topic(name, 2)
            for i in range(20):
                producer.send(name, b"%d" % i, partition=i % 2)
        producer.flush()
        orders = [TopicPartition("acme.orders", p) for p in (0, 1)]
        admin.alter_group_offsets("acme.billing", {orders[0]: 4, orders[1]: 10})
        admin.alter_group_offsets("acme.audit", {orders[0]: 10, orders[1]: 10})
        admin.alter_group_offsets("globex.secret", {TopicPartition("globex.orders", 0): 0})
    return broker


def test_the_dashboard_lists_the_groups_most_behind(
    lagging: BrokerProcess, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "viewer", "globex": "viewer"})
    page = client.get("/console/t/acme/").content.decode()
    table = page.split('id="lag-heading"', 1)[1].split("</table>", 1)[0]
    assert '<a href="/console/t/acme/groups/acme.billing/">acme.billing</a>' in table
    assert re.search(r"acme.billing</a></td><td>\w+</td><td>6</td><td>[\d.]+</td>", table)
    assert "acme.audit" not in table  # caught up
    assert "globex" not in table

    lagging.terminate()
    down = client.get("/console/t/acme/").content.decode()
    assert "The brokers did not answer just now" in down
    assert "Busiest topics" in down  # the rest of the dashboard is still there


def test_a_new_tenant_of_a_deleted_ones_slug_sees_none_of_its_history(
    cluster_rows: Cluster, local_identity: LocalIdentity, console_for: ConsoleFactory
) -> None:
    """History belongs to the tenant, not its slug: once phoenix is deleted, a new
    phoenix with a topic and a group of the same names reads nothing of the old ones'
    (REST API and console), and the old tenant's series went with it."""
    old = make_tenant("phoenix", region=cluster_rows.region)
    make_topic(old, cluster_rows, "phoenix.orders")
    seed_history({"phoenix.orders": 50}, {"phoenix.billing": "phoenix.orders"}, minutes=5)
    assert Series.objects.filter(tenant=old).count() == 2
    Topic.objects.filter(tenant=old).delete()  # its topics' deletion has finished
    delete_tenant(old, actor=OPERATOR)
    assert deprovision_tenant(old.pk, actor=OPERATOR)
    assert not Series.objects.filter(tenant_id=old.pk).exists()

    new = make_tenant("phoenix", region=cluster_rows.region)
    make_topic(new, cluster_rows, "phoenix.orders")
    api = APIClient()
    token = token_for(local_identity, roles={"phoenix": "viewer"})
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    topic = api.get("/api/v1/topics/phoenix.orders/metrics")
    assert topic.status_code == 200, topic.content
    assert not any(p["records_per_s"] for p in topic.json()["points"])
    assert api.get("/api/v1/groups/phoenix.billing/metrics").status_code == 404

    client = console_for(roles={"phoenix": "viewer"})
    for url in ("/console/t/phoenix/metrics.json?range=1d",
                "/console/t/phoenix/topics/phoenix.orders/metrics.json?range=1d",
                "/console/t/phoenix/groups/phoenix.billing/metrics.json"):  # fmt: skip
        status, body = get_json(client, url)
        assert status == 200, url
        values = [v for chart in body["charts"] for s in chart["series"] for v in s["values"]]
        assert not any(values), url
    page = client.get("/console/t/phoenix/").content.decode()
    assert "No records produced in the last hour." in page


def test_the_chart_endpoints_take_a_range_never_instants(
    history: None, console_for: ConsoleFactory
) -> None:
    """The console's charts name a range (1h, 1d) and compute the instants from now: a
    ``from``/``to`` of year 9999 is nothing to them, and a range beyond the two a 400."""
    client = console_for(roles={"acme": "viewer"})
    extreme = "from=9999-12-31T23:00:00Z&to=9999-12-31T23:59:59Z&step=1000000000000000000"
    for url in ("/console/t/acme/metrics.json", "/console/t/acme/topics/acme.orders/metrics.json",
                "/console/t/acme/groups/acme.billing/metrics.json"):  # fmt: skip
        status, body = get_json(client, f"{url}?{extreme}")
        assert (status, body["range"]) == (200, "1h"), url
        assert client.get(f"{url}?range=9999y").status_code == 400, url
    page = client.get(f"/console/t/acme/topics/acme.orders/?{extreme}&range=9999y")
    assert page.status_code == 200
