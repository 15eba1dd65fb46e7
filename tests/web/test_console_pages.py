"""The console's pages in Chromium, signed in through the local issuer's form: the
dashboard, the topic list, creating a topic (a field error first, what was typed kept),
its detail page, a viewer without write forms, another tenant's topic answering like a
missing one, and a ``<script>`` typed into a form shown as text. Every page is checked
with axe-core and screenshotted."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from controlplane.accounts import services
from controlplane.accounts.local import member_subject
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.tenants.models import Membership, Tenant
from controlplane.topics import services as topic_services
from controlplane.topics.models import Topic
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant
from tests.web.conftest import Ui

SYSTEM = Actor.system("tests")
PASSWORD = "a demo password 2"


def _member(username: str, tenant: Tenant, role: str) -> None:
    services.set_local_password(username, PASSWORD, actor=SYSTEM)
    Membership.objects.create(
        tenant=tenant,
        subject=member_subject(username),
        username=username,
        role=role,
        status=ProvisioningStatus.READY,
    )


def _sign_in(ui: Ui, console: str, username: str, start: str) -> None:
    ui.page.goto(console + start)
    ui.page.get_by_label("Username").fill(username)
    ui.page.get_by_label("Password").fill(PASSWORD)
    ui.page.get_by_role("button", name="Sign in").click()


def test_a_developer_signs_in_and_creates_a_topic(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    globex = make_tenant("globex", region=cluster.region)
    _member("dev", acme, "developer")
    topic_services.create_topic(globex, name="secret", partitions=1, actor=SYSTEM)
    page = ui.page

    _sign_in(ui, console, "dev", "/console/t/acme/")
    expect(page.get_by_role("heading", level=1)).to_have_text(acme.name)
    ui.check("dashboard")

    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Topics").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/topics/$"))
    ui.check("topic-list")

    page.goto(console + "/console/t/acme/topics/new/")
    page.get_by_label("Name").fill("<script>alert(1)</script>")
    page.get_by_label("Partitions").fill("3")
    page.get_by_role("button", name="Create", exact=True).click()
    expect(page.get_by_label("Name")).to_have_value("<script>alert(1)</script>")
    expect(page.locator("body")).to_contain_text("letters, digits")
    ui.check("topic-create-error")

    page.get_by_label("Name").fill("orders")
    page.get_by_role("button", name="Create", exact=True).click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/topics/acme\.orders/$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("acme.orders")
    ui.check("topic-detail")
    assert Topic.objects.get(full_name="acme.orders").partitions == 3

    missing = page.goto(console + "/console/t/acme/topics/acme.nosuch/")
    other = page.goto(console + "/console/t/globex/topics/globex.secret/")
    assert missing is not None
    assert other is not None
    assert other.status == missing.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    ui.check("not-found")


def test_a_viewer_sees_topics_without_write_forms(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    _member("watcher", acme, "viewer")
    topic_services.create_topic(acme, name="orders", partitions=2, actor=SYSTEM)

    _sign_in(ui, console, "watcher", "/console/t/acme/topics/")
    expect(ui.page.get_by_role("link", name="acme.orders")).to_be_visible()
    expect(ui.page.get_by_role("link", name="Create a topic")).to_have_count(0)
    ui.check("topic-list-viewer")
    ui.page.get_by_role("link", name="acme.orders").click()
    expect(ui.page.get_by_role("heading", level=1)).to_contain_text("acme.orders")
    expect(ui.page.get_by_role("button", name="Delete topic")).to_have_count(0)
    ui.check("topic-detail-viewer")
    refused = ui.page.goto(console + "/console/t/acme/topics/new/")
    assert refused is not None
    assert refused.status == 403
