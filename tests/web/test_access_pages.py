"""Service accounts, topic ACLs and members in Chromium, signed in through the local
issuer's form: a tenant admin creates a service account and copies its secret from the
one page that shows it, rotates it, grants the account an ACL entry, invites a member;
a viewer sees the lists without forms. Every page is checked with axe-core and
screenshotted."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from controlplane.accounts.identity import InvalidToken, LocalIdentity, get_identity
from controlplane.tenants.models import Membership
from controlplane.topics import services as topic_services
from controlplane.topics.models import TopicAcl
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant
from tests.web.conftest import Ui
from tests.web.test_console_pages import SYSTEM, _member, _sign_in


def _secret_works(client_id: str, secret: str) -> bool:
    identity = get_identity()
    assert isinstance(identity, LocalIdentity)
    try:
        identity.token_for_client(client_id, secret)
    except InvalidToken:
        return False
    return True


def test_a_tenant_admin_manages_accounts_acls_and_members(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    _member("boss", acme, "tenant-admin")
    topic_services.create_topic(acme, name="orders", partitions=1, actor=SYSTEM)
    page = ui.page

    _sign_in(ui, console, "boss", "/console/t/acme/")
    sections = page.get_by_role("navigation", name="Sections")
    sections.get_by_role("link", name="Service accounts").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/service-accounts/$"))
    ui.check("service-accounts")

    page.get_by_label("Name", exact=True).fill("ingest")
    page.get_by_role("button", name="Create", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("Copy the secret now.")
    first = page.get_by_label("Client secret").input_value()
    assert _secret_works("acme--ingest", first)
    ui.check("service-account-secret")

    page.get_by_role("link", name=re.compile("go to the account")).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Service account ingest")
    expect(page.get_by_label("Client secret")).to_have_count(0)
    ui.check("service-account-detail")
    page.get_by_role("button", name="Rotate secret").click()
    second = page.get_by_label("Client secret").input_value()
    assert second != first
    assert _secret_works("acme--ingest", second)
    assert not _secret_works("acme--ingest", first)
    page.go_back()  # the secret page is not kept: back shows no secret
    assert second not in page.content()

    sections.get_by_role("link", name="ACLs").click()
    page.get_by_label("Topic (full name)", exact=True).last.fill("acme.orders")
    page.get_by_label("Principal", exact=True).last.fill("acme--ingest")
    page.get_by_role("button", name="Grant").click()
    expect(page.locator(".errors")).to_contain_text("name at least one operation")
    ui.check("acls-error")
    page.locator("#grant-operations-produce").check()
    page.get_by_role("button", name="Grant").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/acls/\?topic=acme.orders$"))
    assert TopicAcl.objects.get().operations == ["produce"]
    ui.check("acls")

    sections.get_by_role("link", name="Members").click()
    page.get_by_label("Username", exact=True).last.fill("<script>alert(1)</script>")
    page.get_by_label("Role", exact=True).last.select_option("viewer")
    page.get_by_role("button", name="Invite").click()
    expect(page.get_by_label("Username", exact=True).last).to_have_value(
        "<script>alert(1)</script>"
    )
    ui.check("members-error")
    page.get_by_label("Username", exact=True).last.fill("carol")
    page.get_by_role("button", name="Invite").click()
    expect(page.get_by_role("cell", name=re.compile("^carol"))).to_be_visible()
    assert Membership.objects.get(tenant=acme, username="carol").role == "viewer"
    ui.check("members")


def test_a_viewer_sees_the_lists_without_forms(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    _member("watcher", acme, "viewer")

    _sign_in(ui, console, "watcher", "/console/t/acme/service-accounts/")
    expect(ui.page.get_by_role("heading", level=1)).to_have_text("Service accounts")
    expect(ui.page.get_by_role("button", name="Create")).to_have_count(0)
    ui.check("service-accounts-viewer")
    ui.page.goto(console + "/console/t/acme/members/")
    expect(ui.page.get_by_role("cell", name=re.compile("^watcher"))).to_be_visible()
    expect(ui.page.get_by_role("button", name="Invite")).to_have_count(0)
    ui.check("members-viewer")
