"""The Lanes page in Chromium, signed in through the local issuer's form: a developer
finds it in the navigation, is refused a bad lane name on the name field (what was
typed kept), creates a lane, sees it listed with its lane topic linked, and deletes it
with its name typed; a viewer sees the list without forms. Every page is checked with
axe-core and screenshotted."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from controlplane.lanes import services as lane_services
from controlplane.lanes.models import Lane
from controlplane.topics import services as topic_services
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant
from tests.web.conftest import Ui
from tests.web.test_console_pages import SYSTEM, _member, _sign_in


def test_a_developer_creates_and_deletes_a_lane(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    _member("dev", acme, "developer")
    topic_services.create_topic(acme, name="orders", partitions=2, actor=SYSTEM)
    page = ui.page

    _sign_in(ui, console, "dev", "/console/t/acme/")
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Lanes").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/lanes/$"))
    expect(page.get_by_role("cell", name="No lanes.")).to_be_visible()
    ui.check("lanes-empty")

    page.get_by_label("Name", exact=True).fill("Bad_Name")
    page.get_by_label("Topics", exact=True).fill("orders")
    page.get_by_role("button", name="Create lane").click()
    expect(page.locator("#create-name-errors")).to_contain_text("3-32 characters")
    expect(page.get_by_label("Name", exact=True)).to_have_value("Bad_Name")
    expect(page.get_by_label("Topics", exact=True)).to_have_value("orders")
    ui.check("lane-create-error")

    page.get_by_label("Name", exact=True).fill("boe-alice")
    page.get_by_label("Orphan policy").select_option("hold")
    page.get_by_role("button", name="Create lane").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/lanes/boe-alice/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Lane boe-alice")
    lane = Lane.objects.get(tenant=acme, name="boe-alice")
    assert ([t.full_name for t in lane.topics.all()], lane.orphan_policy) == (
        ["acme.orders"],
        "hold",
    )
    # What the controller does when a broker asks for the lane topic on first produce.
    lane_services.ensure_lane_topic("acme", "acme.orders~boe-alice", actor=SYSTEM)
    page.reload()
    ui.check("lane-detail")

    page.get_by_role("link", name="← Lanes").click()
    row = page.get_by_role("row", name=re.compile("^boe-alice"))
    expect(row).to_contain_text("hold")
    expect(row.get_by_role("link", name="acme.orders~boe-alice")).to_be_visible()
    ui.check("lanes")

    row.get_by_role("link", name="boe-alice", exact=True).click()
    page.get_by_label("Lane name").fill("boe-alice")
    page.get_by_role("button", name="Delete lane").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/lanes/$"))
    expect(page.get_by_role("cell", name="No lanes.")).to_be_visible()
    assert not Lane.objects.exists()


def test_a_viewer_sees_the_lanes_without_forms(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    _member("watcher", acme, "viewer")
    lane_services.create_lane(acme, name="ppe", actor=SYSTEM)

    _sign_in(ui, console, "watcher", "/console/t/acme/lanes/")
    expect(ui.page.get_by_role("link", name="ppe", exact=True)).to_be_visible()
    expect(ui.page.get_by_role("button", name="Create lane")).to_have_count(0)
    ui.check("lanes-viewer")
    ui.page.get_by_role("link", name="ppe", exact=True).click()
    expect(ui.page.get_by_role("heading", level=1)).to_have_text("Lane ppe")
    expect(ui.page.get_by_role("button", name="Delete lane")).to_have_count(0)
    ui.check("lane-detail-viewer")
