"""The console's charts in Chromium: an hour of rate and lag history (written through
the metrics service) for topics and groups held by a real broker. The dashboard, a
topic's page and a group's page each draw their charts — read back from the canvas
uPlot painted — with no Content-Security-Policy violation, under axe-core; the range
links switch to the day. With ``MERIDIAN_DOCS_SCREENSHOT`` set to a path, the dashboard
is also saved there (the README's picture: docs/console-dashboard.png)."""

from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import Page, expect

from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from dataplane.client import Admin, Producer, TopicPartition
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster
from tests.web.conftest import Ui
from tests.web.history import seed_history
from tests.web.test_console_pages import _member, _sign_in

RATES = {"acme.clicks": 240.0, "acme.orders": 90.0, "acme.payments": 35.0, "acme.audit": 6.0}
GROUPS = {"acme.analytics": "acme.clicks", "acme.billing": "acme.orders"}
SERIES_COLOR = (11, 92, 173)  # charts.js's first colour, #0b5cad

# Pixels of the chart's canvas in a series' colour: a drawn line has hundreds.
PAINTED = """([selector, rgb]) => {
  const canvas = document.querySelector(selector + ' canvas');
  if (!canvas) return -1;
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (pixels[i + 3] > 200 && Math.abs(pixels[i] - rgb[0]) < 24
        && Math.abs(pixels[i + 1] - rgb[1]) < 24 && Math.abs(pixels[i + 2] - rgb[2]) < 24) {
      painted++;
    }
  }
  return painted;
}"""
# What uPlot holds: the number of non-null values of each series.
PLOTTED = """(selector) => {
  const plot = document.querySelector(selector).uplot;
  return plot ? plot.data.slice(1).map(s => s.filter(v => v !== null).length) : null;
}"""


@pytest.fixture
def traffic(broker: BrokerProcess, transactional_db: None) -> Tenant:
    """acme's four topics on a real broker with 30 records each, its two groups behind,
    and an hour of their history."""
    cluster = register_static_cluster([broker])
    acme = make_tenant("acme", region=cluster.region)
    with Admin(broker.address) as admin, Producer(broker.address) as producer:
        for name in RATES:
            Topic.objects.create(
                tenant=acme, cluster=cluster, name=name.split(".", 1)[1], full_name=name,
                partitions=2, retention_ms=3_600_000, retention_bytes=2**30, status="ready",
            )  # fmt: skip
            admin.create_topic(name, 2)
            for i in range(30):
                producer.send(name, b"record %d" % i, partition=i % 2)
        producer.flush()
        # acme.analytics 26 records behind, acme.billing 20: the lag table's order.
        for (group, topic), at in zip(GROUPS.items(), (2, 5), strict=True):
            admin.alter_group_offsets(
                group, {TopicPartition(topic, 0): at, TopicPartition(topic, 1): at}
            )
    seed_history(RATES, GROUPS, minutes=60)
    return acme


def assert_drawn(page: Page, chart: str, lines: int) -> None:
    selector = f'[data-chart="{chart}-data"]'
    expect(page.locator(selector + " canvas")).to_be_visible()
    plotted = page.evaluate(PLOTTED, selector)
    assert plotted is not None
    assert len(plotted) == lines, plotted
    assert all(n > 100 for n in plotted), plotted  # an hour of 10 s points
    assert page.evaluate(PAINTED, [selector, list(SERIES_COLOR)]) > 200


def csp_violations(page: Page) -> list[str]:
    messages: list[str] = []
    page.on(
        "console",
        lambda m: (
            messages.append(f"{page.url}: {m.text} at {m.location}")
            if "Content Security Policy" in m.text
            else None
        ),
    )
    return messages


def test_the_dashboard_topic_and_group_pages_draw_their_charts(
    ui: Ui, console: str, traffic: Tenant
) -> None:
    _member("ada", traffic, "tenant-admin")
    page = ui.page
    page.set_viewport_size({"width": 1280, "height": 1000})
    _sign_in(ui, console, "ada", "/console/t/acme/")
    expect(page.get_by_role("heading", level=1)).to_have_text(traffic.name)
    # From here on, the console's pages only (the local issuer's sign-in form has an
    # inline style of its own): loaded again to be listened to.
    violations = csp_violations(page)
    page.reload()
    expect(page.get_by_role("heading", name="Busiest topics")).to_be_visible()
    assert_drawn(page, "busiest-produce", lines=4)
    assert_drawn(page, "busiest-consume", lines=4)
    figures = page.locator("#busiest-produce table")
    expect(figures.get_by_role("rowheader")).to_have_text(list(RATES))  # busiest first
    lagging = page.locator("table.lagging")
    expect(lagging.get_by_role("link")).to_have_text(["acme.analytics", "acme.billing"])
    ui.check("dashboard-charts")
    if target := os.environ.get("MERIDIAN_DOCS_SCREENSHOT"):
        page.screenshot(path=target, full_page=True)

    page.get_by_role("link", name="Last day").click()
    expect(page).to_have_url(re.compile(r"\?range=1d"))
    expect(page.locator("#busiest-produce figcaption")).to_contain_text("last day")
    expect(page.locator('[data-chart="busiest-produce-data"] canvas')).to_be_visible()
    ui.check("dashboard-charts-day")

    lagging_link = page.get_by_role("link", name="acme.billing")
    lagging_link.click()
    expect(page.get_by_role("heading", level=1)).to_have_text("acme.billing")
    assert_drawn(page, "lag-records", lines=1)
    ui.check("group-lag-chart")

    page.goto(console + "/console/t/acme/topics/acme.orders/")
    for chart in ("produce-records", "produce-bytes", "consume-records"):
        assert_drawn(page, chart, lines=1)
    ui.check("topic-rate-charts")
    # What charts.js refreshes from, with the browser's session.
    src = page.locator("[data-chart-src]").get_attribute("data-chart-src")
    refreshed = page.request.get(f"{console}{src}")
    assert refreshed.ok
    assert [c["id"] for c in refreshed.json()["charts"]] == [
        "produce-records", "produce-bytes", "consume-records",
    ]  # fmt: skip
    assert not violations, violations
