"""The Mirrors page in Chromium, signed in through the local issuer's form: a developer
finds Mirrors in the navigation, is refused a link from a region to itself (what was
typed kept), creates a two-way link, sees its lag chart drawn and its lag per partition,
pauses and resumes it, and deletes it. Every page is checked with axe-core and
screenshotted."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from controlplane.core.actors import Actor
from controlplane.mirrors.models import MirrorLink, MirrorPartition
from controlplane.regions.models import Region
from controlplane.topics import services as topic_services
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant
from tests.web.conftest import Ui
from tests.web.history import seed_history
from tests.web.test_console_pages import _member, _sign_in

SYSTEM = Actor.system("tests")


def test_a_developer_mirrors_a_topic_to_another_region(ui: Ui, console: str) -> None:
    east = make_cluster("east").region
    make_cluster("west")
    acme = make_tenant("acme", region=east)
    acme.regions.set(Region.objects.filter(name="west"))
    topic_services.create_topic(acme, name="orders", partitions=2, actor=SYSTEM)
    _member("dev", acme, "developer")
    page = ui.page

    _sign_in(ui, console, "dev", "/console/t/acme/")
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Mirrors").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/mirrors/$"))
    expect(page.get_by_role("cell", name="No mirror links.")).to_be_visible()
    ui.check("mirrors-empty")

    page.get_by_label("Name", exact=True).fill("orders-west")
    page.get_by_label("Source region").select_option("east")
    page.get_by_label("Target region").select_option("east")
    page.get_by_label("Topics", exact=True).fill("orders")
    page.get_by_role("button", name="Create mirror link").click()
    expect(page.locator(".errors").first).to_contain_text("region")
    expect(page.get_by_label("Name", exact=True)).to_have_value("orders-west")
    ui.check("mirror-create-error")

    page.get_by_label("Target region").select_option("west")
    page.get_by_label("Direction").select_option("two-way")
    page.get_by_role("button", name="Create mirror link").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/mirrors/orders-west/$"))
    link = MirrorLink.objects.get(name="orders-west")
    for partition, (next_offset, end) in enumerate([(900, 1000), (40, 40)]):
        MirrorPartition.objects.create(
            link=link, from_region=link.source_region, to_region=link.target_region,
            source_topic="acme.orders", target_topic="acme.orders", partition=partition,
            state="copying", next_source_offset=next_offset, source_end_offset=end,
            lag_records=end - next_offset, lag_seconds=3.0 if end > next_offset else 0.0,
            copied_records=next_offset,
        )  # fmt: skip
    seed_history({}, mirrors={("acme.orders-west", "east>west"): 300,
                              ("acme.orders-west", "west>east"): 30}, minutes=10)  # fmt: skip
    page.reload()
    expect(page.locator("#lag")).to_contain_text("100 records")
    expect(page.locator("#mirror-lag-records .chart-plot canvas")).to_be_visible()
    expect(page.get_by_role("row", name=re.compile(r"east → west"))).to_have_count(2)
    ui.check("mirror-detail")

    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("button", name="Resume")).to_be_visible()
    expect(page.locator("#health")).to_contain_text("paused")
    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_role("button", name="Pause")).to_be_visible()

    page.get_by_label("Mirror link name").fill("orders-west")
    page.get_by_role("button", name="Delete mirror link").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/mirrors/$"))
    expect(page.get_by_role("cell", name="deleting")).to_be_visible()
    ui.check("mirrors-deleting")
