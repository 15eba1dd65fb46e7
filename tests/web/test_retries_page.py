"""The Delayed and Retries pages in Chromium, signed in through the local issuer's form:
a developer finds both in the navigation, sees that nothing is waiting (and no message a
crafted link carries), is refused a bad
retry policy with the API's message (what was typed kept), declares one, sees its page
say the brokers are not there to read its dead letters (this test runs none), and
deletes it with the group's name typed. Every page is checked with axe-core and
screenshotted. ``tests/controlplane/delays`` reads and replays dead letters on real
brokers."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from controlplane.retries.models import RetryPolicy
from controlplane.topics import services as topic_services
from controlplane.topics.models import Topic
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant
from tests.web.conftest import Ui
from tests.web.test_console_pages import SYSTEM, _member, _sign_in


def test_a_developer_declares_and_deletes_a_retry_policy(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    _member("dev", acme, "developer")
    topic_services.create_topic(acme, name="orders", partitions=2, actor=SYSTEM)
    page = ui.page

    _sign_in(ui, console, "dev", "/console/t/acme/")
    sections = page.get_by_role("navigation", name="Sections")
    sections.get_by_role("link", name="Delayed").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/delayed/$"))
    expect(page.get_by_role("cell", name="Nothing is waiting.")).to_be_visible()
    ui.check("delayed-empty")
    # A cancel's outcome comes back as a code the page words itself: a link carrying a
    # message of its own shows nothing.
    for crafted in ("cancelled=all+your+records+were+deleted", "cancelled=gone&id=<b>x</b>"):
        page.goto(f"{console}/console/t/acme/delayed/?{crafted}")
        expect(page.get_by_role("status")).to_have_count(0)
    page.goto(f"{console}/console/t/acme/delayed/?cancelled=gone&id=acme.orders%3A0%3A5")
    expect(page.get_by_role("status")).to_have_text("acme.orders:0:5 is no longer pending")

    sections.get_by_role("link", name="Retries").click()
    expect(page.get_by_role("cell", name="No retry policies.")).to_be_visible()
    page.get_by_label("Group", exact=True).fill("billing")
    page.get_by_label("Max attempts").fill("0")
    page.get_by_role("button", name="Create retry policy").click()
    expect(page.locator("#create-max_attempts-errors")).to_be_visible()
    expect(page.get_by_label("Group", exact=True)).to_have_value("billing")
    ui.check("retry-create-error")

    page.get_by_label("Max attempts").fill("4")
    page.get_by_role("button", name="Create retry policy").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/retries/billing/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Retries of acme.billing")
    expect(page.get_by_role("alert")).to_contain_text("brokers did not answer")
    assert RetryPolicy.objects.get(tenant=acme).max_attempts == 4
    assert Topic.objects.filter(full_name="acme.billing.dlq").exists()
    ui.check("retry-detail")

    page.get_by_label("Type the group's name").fill("billing")
    page.get_by_role("button", name="Delete").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/retries/$"))
    expect(page.get_by_role("cell", name="No retry policies.")).to_be_visible()
    assert not RetryPolicy.objects.exists()
