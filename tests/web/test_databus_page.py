"""The Databus pages in Chromium, signed in through the local issuer's form: a developer
finds them in the navigation, is refused a document naming another tenant's topic and
one breaking the schema, each message under the document and named by field (what was
typed kept), creates a configuration, sees its streams and the agents running it,
changes it (version 2) and deletes it with its name typed; a viewer reads without
forms. Every page is checked with axe-core and screenshotted."""

from __future__ import annotations

import json
import re
import uuid

from django.utils import timezone
from playwright.sync_api import expect

from controlplane.databus import services as databus_services
from controlplane.databus.models import DatabusConfig
from controlplane.topics import services as topic_services
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant
from tests.web.conftest import Ui
from tests.web.test_console_pages import SYSTEM, _member, _sign_in

SPOOL = {
    "records_in": 5, "records_out": 3, "bytes_in": 50, "bytes_out": 30, "spool_records": 2,
    "spool_bytes": 2048, "spool_age_s": 1.5, "dropped": 0, "rejected": 0,
}  # fmt: skip


def clicks(topic: str, **settings: object) -> str:
    return json.dumps({"streams": {"clicks": {"topic": topic, **settings}}}, indent=2)


def test_a_developer_creates_changes_and_deletes_a_configuration(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    globex = make_tenant("globex", region=cluster.region)
    _member("dev", acme, "developer")
    topic_services.create_topic(acme, name="orders", partitions=2, actor=SYSTEM)
    topic_services.create_topic(globex, name="orders", partitions=2, actor=SYSTEM)
    page = ui.page

    _sign_in(ui, console, "dev", "/console/t/acme/")
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Databus").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/databus/$"))
    expect(page.get_by_role("cell", name="No Databus configurations.")).to_be_visible()
    ui.check("databus-empty")

    document = page.get_by_label("Document (JSON)")
    page.get_by_label("Name", exact=True).fill("web")
    document.fill(clicks("globex.orders"))
    page.get_by_role("button", name="Create configuration").click()
    errors = page.locator("#create-document-errors")
    expect(errors).to_have_text("streams.clicks.topic: no topic 'globex.orders' in tenant 'acme'")
    expect(page.get_by_label("Name", exact=True)).to_have_value("web")
    ui.check("databus-create-error")

    document.fill(clicks("acme.orders", linger_ms=70000))
    page.get_by_role("button", name="Create configuration").click()
    expect(errors).to_have_text("streams.clicks.linger_ms: must be an integer from 0 to 60000")
    document.fill("{not json")
    page.get_by_role("button", name="Create configuration").click()
    expect(errors).to_contain_text("not JSON")
    assert not DatabusConfig.objects.exists()

    document.fill(clicks("acme.orders", compression="zstd"))
    page.get_by_label("Description").fill("the web tier")
    page.get_by_role("button", name="Create configuration").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/databus/web/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Databus configuration web")
    stream = page.get_by_role("row", name=re.compile("^clicks"))
    expect(stream).to_contain_text("acme.orders")
    expect(stream).to_contain_text("zstd")
    expect(stream).to_contain_text("ack_on_spool")
    expect(stream).to_contain_text("50 ms")

    # What an agent's heartbeat records.
    config = DatabusConfig.objects.get(tenant=acme, name="web")
    agent_id = uuid.uuid4()
    databus_services.record_agent_heartbeat(
        acme, agent_id=agent_id, config_name="web", version=1, hostname="web-1", pid=7,
        started_at=timezone.now(), stats={"clicks": SPOOL}, principal="p",
    )  # fmt: skip
    page.reload()
    agent = page.get_by_role("row", name=re.compile(str(agent_id)))
    expect(agent).to_contain_text("web-1")
    expect(agent).to_contain_text("yes")
    expect(agent).to_contain_text("live")
    expect(agent).to_contain_text("2 records, 2.0 KB")
    ui.check("databus-detail")

    edit = page.get_by_label("Document (JSON)")
    edit.fill(clicks("acme.orders", compression="snappy"))
    page.get_by_role("button", name="Save configuration").click()
    expect(page.locator("dl.config")).to_contain_text("Version2")
    expect(agent).to_contain_text("no (latest 2)")
    config.refresh_from_db()
    assert (config.version, config.description) == (2, "the web tier")
    assert config.document["streams"]["clicks"]["compression"] == "snappy"

    edit.fill(clicks("acme.orders", when_full="explode"))
    page.get_by_role("button", name="Save configuration").click()
    expect(page.locator("#edit-document-errors")).to_contain_text("streams.clicks.when_full:")
    ui.check("databus-edit-error")

    page.get_by_label("Configuration name").fill("web")
    page.get_by_role("button", name="Delete configuration").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/databus/$"))
    expect(page.get_by_role("cell", name="No Databus configurations.")).to_be_visible()
    assert not DatabusConfig.objects.exists()


def test_a_viewer_reads_the_configurations_without_forms(ui: Ui, console: str) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    _member("watcher", acme, "viewer")
    topic_services.create_topic(acme, name="orders", partitions=2, actor=SYSTEM)
    document = {"streams": {"clicks": {"topic": "acme.orders"}}}
    databus_services.create_databus_config(acme, name="web", document=document, actor=SYSTEM)

    _sign_in(ui, console, "watcher", "/console/t/acme/databus/")
    expect(ui.page.get_by_role("link", name="web", exact=True)).to_be_visible()
    expect(ui.page.get_by_role("button", name="Create configuration")).to_have_count(0)
    ui.check("databus-viewer")
    ui.page.get_by_role("link", name="web", exact=True).click()
    expect(ui.page.get_by_role("heading", level=1)).to_have_text("Databus configuration web")
    expect(ui.page.locator("pre.json")).to_contain_text('"topic": "acme.orders"')
    expect(ui.page.get_by_role("button", name="Delete configuration")).to_have_count(0)
    ui.check("databus-detail-viewer")
