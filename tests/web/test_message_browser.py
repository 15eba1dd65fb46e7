"""The message browser in Chromium, on a broker with authentication on that trusts the
console's local issuer: a developer signs in, produces test records through the form
(a ``<script>`` value among them), browses them as JSON, text and hex, and nothing a
record holds runs. Every page is checked with axe-core and screenshotted."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Dialog, expect

from controlplane.accounts.identity import get_identity
from controlplane.topics import services as topic_services
from controlplane.topics.reconcile import reconcile_topic
from dataplane.client import Producer
from dataplane.client.auth import StaticToken
from tests.controlplane.accounts.test_broker_auth import _broker, broker_auth
from tests.controlplane.conftest import token_for
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster
from tests.web.conftest import Ui
from tests.web.test_console_pages import SYSTEM, _member, _sign_in

__all__ = ["broker_auth"]  # a fixture this module uses


@pytest.fixture
def auth_broker(console: str, broker_auth: None, tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker verifying tokens with the live server's keys (``console`` set the
    control plane's URL to it)."""
    broker = _broker(tmp_path / "broker", tmp_path / "broker-secret")
    try:
        yield broker
    finally:
        broker.kill()


def test_a_developer_produces_and_browses_records(
    ui: Ui, console: str, auth_broker: BrokerProcess
) -> None:
    cluster = register_static_cluster([auth_broker])
    acme = make_tenant("acme", region=cluster.region)
    _member("dev", acme, "developer")
    topic = topic_services.create_topic(acme, name="orders", partitions=1, actor=SYSTEM)
    reconcile_topic(topic.pk)
    token = token_for(get_identity(), roles={"acme": "developer"})  # type: ignore[arg-type]
    with Producer(auth_broker.address, credentials=StaticToken(token), acks="all") as producer:
        producer.send("acme.orders", b"\x00\x9f\x92\x96 binary", key=b"bin").result(timeout=20)
    dialogs: list[Any] = []

    def refuse(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page = ui.page
    page.on("dialog", refuse)
    _sign_in(ui, console, "dev", "/console/t/acme/topics/acme.orders/")
    page.get_by_role("link", name="Browse messages").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/topics/acme\.orders/messages/$"))
    expect(page.locator("pre.value.hex")).to_contain_text("00 9f 92 96")
    ui.check("messages-binary")

    for value in ('{"order": 7, "items": ["tea", "cake"]}', "<script>alert(1)</script>"):
        page.get_by_label("Key", exact=True).fill("k")
        page.get_by_label("Value", exact=True).fill(value)
        page.get_by_label("Headers", exact=True).fill("source=<b>console</b>")
        page.get_by_role("button", name="Produce").click()
        expect(page.get_by_role("status")).to_contain_text("Produced a record to partition 0")
    values = page.locator("pre.value")
    expect(values).to_have_count(1)
    expect(values.first).to_have_text("<script>alert(1)</script>")
    expect(page.locator("dl.headers dd").first).to_have_text("<b>console</b>")
    assert page.locator("main script").count() == 0
    ui.check("messages-produced-script")

    page.get_by_role("group", name="Start from").get_by_label("an offset").check()
    page.get_by_label("Offset", exact=True).fill("0")
    page.get_by_role("button", name="Show records").click()
    expect(page.locator("pre.value")).to_have_count(3)
    expect(page.locator("pre.value.json")).to_contain_text('"order": 7')
    expect(page.locator("pre.value.hex")).to_contain_text("00 9f 92 96")
    ui.check("messages-from-offset")

    page.get_by_role("navigation", name="Record pages").get_by_role("link", name="hex").click()
    expect(page.locator("pre.value.hex")).to_have_count(3)
    ui.check("messages-hex")
    assert dialogs == []
    assert auth_broker.address not in page.content()
