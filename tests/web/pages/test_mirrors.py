"""Mirror pages: list with health and lag, create (the API's messages on the form named
by its fields), detail with the lag history chart and the lag table per partition,
pause/resume, delete typed; every role reads, writers get the forms; another tenant's
link is a 404 like a missing one."""

from __future__ import annotations

import html
from typing import Any

import pytest

from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent
from controlplane.mirrors import services as mirror_services
from controlplane.mirrors.models import MirrorLink, MirrorPartition
from controlplane.regions.models import Cluster, Region
from controlplane.tenants.models import Tenant
from controlplane.topics import services as topic_services
from tests.controlplane.api_base import make_cluster
from tests.web.history import seed_history
from tests.web.pages.conftest import ConsoleFactory
from tests.web.pages.test_topics import field_errors
from web.views import messages

SYSTEM = Actor.system("tests")
MIRRORS = "/console/t/acme/mirrors/"


@pytest.fixture(autouse=True)
def _regions(cluster_rows: Cluster, acme: Tenant, globex: Tenant) -> None:
    """A second region, west, which acme and globex may use; topic orders in each's
    home region."""
    make_cluster("west")
    for tenant in (acme, globex):
        tenant.regions.set(Region.objects.filter(name="west"))
        topic_services.create_topic(tenant, name="orders", partitions=2, actor=SYSTEM)


def make_link(tenant: Tenant, name: str = "orders-west", **fields: Any) -> MirrorLink:
    home = tenant.home_region
    assert home is not None
    return mirror_services.create_link(
        tenant, name=name, source_region=home.name, target_region="west",
        topics=["orders"], actor=SYSTEM, **fields,
    )  # fmt: skip


def report(link: MirrorLink, partition: int, next_offset: int, end: int) -> None:
    MirrorPartition.objects.create(
        link=link, from_region=link.source_region, to_region=link.target_region,
        source_topic=f"{link.tenant.slug}.orders", target_topic=f"{link.tenant.slug}.orders",
        partition=partition, state="copying", next_source_offset=next_offset,
        source_end_offset=end, lag_records=end - next_offset, lag_seconds=2.5,
        copied_records=next_offset,
    )  # fmt: skip


@pytest.mark.parametrize("role", ["viewer", "developer"])
def test_every_role_reads_mirrors_and_writers_get_the_forms(
    role: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    link = make_link(acme)
    report(link, 0, 90, 100)
    client = console_for(roles={"acme": role})
    listing = client.get(MIRRORS).content.decode()
    assert f'<a href="{MIRRORS}orders-west/">orders-west</a>' in listing
    detail = client.get(f"{MIRRORS}orders-west/").content.decode()
    assert "<td>acme.orders</td>" in detail  # the lag table
    assert 'id="lag">10 records' in detail
    forms = ('id="create-name"' in listing, ">Pause<" in detail, 'name="confirm"' in detail)
    assert forms == (role != "viewer",) * 3


def test_the_nav_links_mirrors(acme: Tenant, console_for: ConsoleFactory) -> None:
    page = console_for(roles={"acme": "viewer"}).get(MIRRORS).content.decode()
    assert f'<a href="{MIRRORS}" aria-current="page">Mirrors</a>' in page


def test_a_developer_creates_pauses_resumes_and_deletes_a_link(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    typed = {
        "name": "orders-west", "source_region": "local", "target_region": "west",
        "direction": "two-way", "topics": "orders", "include_lanes": "true",
    }  # fmt: skip
    response = client.post(MIRRORS, typed)
    assert response.status_code == 302, response.content
    assert response["Location"] == f"{MIRRORS}orders-west/"
    link = MirrorLink.objects.get(tenant=acme, name="orders-west")
    assert (link.direction, link.topics, link.include_lanes) == ("two-way", ["orders"], True)
    assert client.post(f"{MIRRORS}orders-west/pause/").status_code == 302
    link.refresh_from_db()
    assert link.paused
    assert ">Resume<" in client.get(f"{MIRRORS}orders-west/").content.decode()
    assert client.post(f"{MIRRORS}orders-west/resume/").status_code == 302
    link.refresh_from_db()
    assert not link.paused
    assert client.post(f"{MIRRORS}orders-west/delete/", {"confirm": "nope"}).status_code == 422
    assert (
        client.post(f"{MIRRORS}orders-west/delete/", {"confirm": "orders-west"}).status_code == 302
    )
    link.refresh_from_db()
    assert link.status == "deleting"
    actions = set(
        AuditEvent.objects.filter(action__startswith="mirror.").values_list("action", flat=True)
    )
    assert actions == {"mirror.create", "mirror.update", "mirror.delete"}


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"target_region": "local"}, None, "region"),
        ({"topics": "nope"}, "topics", "no topic 'nope' in tenant 'acme'"),
        ({"topic_pattern": "orders-*"}, "topic_pattern", "exactly one of the two"),
        ({"start_position": "timestamp"}, "start_timestamp_ms", "required with start_position"),
    ],
)
def test_link_errors_appear_on_the_form(
    typed: dict[str, str], field: str | None, message: str, console_for: ConsoleFactory
) -> None:
    base = {
        "name": "link-one",
        "source_region": "local",
        "target_region": "west",
        "topics": "orders",
    }
    response = console_for(roles={"acme": "developer"}).post(MIRRORS, base | typed)
    assert response.status_code == 422
    page = html.unescape(response.content.decode())
    if field is not None:
        errors = [
            html.unescape(m) for m in field_errors(response.content.decode(), field, "create-")
        ]
        assert any(message in error for error in errors), errors
    assert message in page
    assert 'value="link-one"' in page  # what was typed is kept
    assert not MirrorLink.objects.exists()


def test_the_lag_chart_draws_each_leg(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_link(acme, direction="two-way")
    seed_history({}, mirrors={("acme.orders-west", "local>west"): 400,
                              ("acme.orders-west", "west>local"): 20}, minutes=10)  # fmt: skip
    client = console_for(roles={"acme": "viewer"})
    page = client.get(f"{MIRRORS}orders-west/").content.decode()
    assert 'id="mirror-lag-records"' in page
    assert 'id="mirror-lag-seconds"' in page
    assert '<th scope="row">local → west</th>' in page
    assert '<th scope="row">west → local</th>' in page
    body = client.get(f"{MIRRORS}orders-west/metrics.json?range=1d").json()
    series = {s["label"] for c in body["charts"] for s in c["series"]}
    assert series == {"local → west", "west → local"}
    assert client.get(f"{MIRRORS}orders-west/metrics.json?range=2y").status_code == 400


def test_a_link_without_history_says_so(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_link(acme)
    page = console_for(roles={"acme": "viewer"}).get(f"{MIRRORS}orders-west/").content.decode()
    assert "No history yet" in page
    assert "No partition reported yet" in page


def test_another_tenants_link_is_a_404(globex: Tenant, console_for: ConsoleFactory) -> None:
    make_link(globex, name="theirs")
    client = console_for(roles={"acme": "tenant-admin"})
    for url in (f"{MIRRORS}theirs/", f"{MIRRORS}theirs/metrics.json"):
        assert client.get(url).status_code == 404
    for action in ("pause", "resume"):
        assert client.post(f"{MIRRORS}theirs/{action}/").status_code == 404
    assert client.post(f"{MIRRORS}theirs/delete/", {"confirm": "theirs"}).status_code == 404
    assert MirrorLink.objects.get(name="theirs").status != "deleting"


def test_a_copys_topic_pages_show_the_copy_not_the_origin(
    acme: Tenant, console_for: ConsoleFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``?region=`` the topic page, its links and forms and its message browser
    stay on the mirror copy; its rate charts (recorded for the origin only) are not
    drawn as if they were the copy's."""
    make_link(acme)
    client = console_for(roles={"acme": "developer"})
    topic = "/console/t/acme/topics/acme.orders/"
    copy = client.get(f"{topic}?region=west").content.decode()
    assert "region west" in copy
    assert f'href="{topic}messages/?region=west"' in copy
    assert f'action="{topic}config/?region=west"' in copy
    assert "data-chart-src" not in copy
    assert "Rates are recorded for the origin topic only" in copy
    origin = client.get(topic).content.decode()
    assert f'href="{topic}messages/"' in origin
    assert "data-chart-src" in origin
    assert client.get(f"{topic}metrics.json?region=west").json()["charts"] == []

    read: list[str] = []

    def bootstrap_of(row: Any) -> list[str]:
        read.append(row.cluster.region.name)
        return []

    monkeypatch.setattr(messages, "bootstrap_of", bootstrap_of)
    browser = client.get(f"{topic}messages/?region=west&partition=1&mode=offset&offset=3")
    page = browser.content.decode()
    assert read == ["west"]
    assert "Messages of acme.orders in region west" in page
    assert '<input type="hidden" name="region" value="west">' in page
    assert f'href="{topic}?region=west"' in page
    client.get(f"{topic}messages/")
    assert read == ["west", "local"]


def test_a_copys_forms_return_to_the_copys_page(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_link(acme)
    client = console_for(roles={"acme": "developer"})
    topic = "/console/t/acme/topics/acme.orders/"
    for form in ("config", "partitions", "delete"):
        answer = client.get(f"{topic}{form}/?region=west")
        assert answer["Location"] == f"{topic}?region=west", form
    refused = client.post(f"{topic}config/?region=west", {"retention_ms": "3600000"})
    assert "region west" in refused.content.decode()  # its errors shown on the copy's page
