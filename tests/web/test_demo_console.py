"""The README's promise, in Chromium: ``./dev run`` (the demo, with its steady traffic),
then the printed console URL and the demo developer's password sign in; the dashboard
draws the demo's traffic, the demo topic's records can be browsed, and the slower
consumer group shows its lag in records and in seconds. Every page is checked with
axe-core and screenshotted."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.support.demo import Demo, running_demo
from tests.web.conftest import Ui
from tests.web.test_console_charts import PLOTTED

# Collected every 2 s here (10 s points still), so a chart has points within ~30 s.
DEMO_ENV = {"MERIDIAN_METRICS_INTERVAL_S": "2"}


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    with running_demo(tmp_path / "demo", records=200, env=DEMO_ENV, regions="east") as running:
        yield running


def _plotted_points(page: Page, chart: str) -> int:
    """The most points a series of ``chart`` has (0: no chart yet, nothing recorded)."""
    selector = f'[data-chart="{chart}-data"]'
    if page.locator(selector).count() == 0:
        return 0
    plotted = page.evaluate(PLOTTED, selector)
    return max(plotted or [0])


def test_the_demo_console_shows_the_demo_traffic(ui: Ui, demo: Demo) -> None:
    console = demo.printed(r"^Console\s+(\S+)")
    printed = re.findall(r"^  (\S+)\s+(\S+)\s+password (\S+)$", demo.output, re.MULTILINE)
    users = {role: (username, password) for role, username, password in printed}
    username, password = users["developer"]
    page = ui.page
    page.set_viewport_size({"width": 1280, "height": 1000})

    page.goto(console)
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/console/t/demo/$"))
    # The demo's producer and slower group move the dashboard's charts and lag table.
    deadline = time.monotonic() + 90
    while _plotted_points(page, "busiest-produce") < 2 and time.monotonic() < deadline:
        time.sleep(3)
        page.reload()
    assert _plotted_points(page, "busiest-produce") >= 2
    expect(page.locator("#busiest-produce table").get_by_role("rowheader")).to_contain_text(
        ["demo.orders"]
    )
    expect(page.locator("table.lagging").get_by_role("link", name="demo.analytics")).to_be_visible()
    ui.check("demo-dashboard")

    page.goto(console + "t/demo/topics/demo.orders/")
    expect(page.get_by_role("heading", level=1)).to_contain_text("demo.orders")
    ui.check("demo-topic")
    page.get_by_role("link", name="Browse messages").click()
    expect(page.locator("pre.value").first).to_have_text(re.compile(r"^(order|event)-\d+$"))
    ui.check("demo-messages")

    page.goto(console + "t/demo/groups/demo.analytics/")
    expect(page.get_by_role("heading", level=1)).to_have_text("demo.analytics")
    summary = page.locator("main p", has_text="State:")
    expect(summary).to_contain_text(re.compile(r"lag \d+ records?, \d+\.\d s"))
    expect(page.get_by_role("columnheader", name="Lag (seconds)")).to_be_visible()
    ui.check("demo-group")
