"""The Exports and Indexes pages in Chromium, signed in through the local issuer's
form: a developer finds Exports in the navigation, is refused a target the platform
does not allow on its field (what was typed kept), creates an export and runs it;
creates an index and looks a value up with the query form. The Spark side's
``query_index`` is stood in for at its one seam (``controlplane.indexes.query``), and
runs are queued, not launched. Every page is checked with axe-core and screenshotted."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from controlplane.exports import services as export_services
from controlplane.exports.models import ExportRun
from controlplane.indexes import query as index_query
from tests.controlplane.exports.support import tiered_cluster, tiered_topic
from tests.controlplane.indexes.test_api import FakeAnswer, FakeRecord
from tests.support.controlplane import make_tenant
from tests.web.conftest import Ui
from tests.web.test_console_pages import _member, _sign_in


def test_a_developer_exports_a_topic_and_queries_an_index(
    ui: Ui, console: str, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.EXPORT_ALLOWED_URIS = [f"{tmp_path}/exports/{{tenant}}/"]
    settings.INDEX_ROOT = str(tmp_path / "indexes")
    cluster = tiered_cluster(tmp_path / "store")
    acme = make_tenant("acme", region=cluster.region)
    tiered_topic(acme)
    _member("dev", acme, "developer")
    monkeypatch.setattr(export_services, "_enqueue", lambda e, r: None)
    record = FakeRecord(
        "acme.orders", 1, 5, 1_700_000_000_000, b"k", b'{"user":{"id":7}}', (), None
    )
    monkeypatch.setattr(
        index_query, "spark_query_index", lambda spec, **kw: FakeAnswer([record], 0, 1, None, {})
    )
    page = ui.page

    _sign_in(ui, console, "dev", "/console/t/acme/")
    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Exports").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/exports/$"))
    expect(page.get_by_role("cell", name="No exports.")).to_be_visible()
    ui.check("exports-empty")

    page.get_by_label("Name", exact=True).fill("daily")
    page.get_by_label("Topic", exact=True).fill("orders")
    page.get_by_label("Target", exact=True).fill("http://example.com/x")
    page.get_by_role("button", name="Create export").click()
    expect(page.locator("#create-target_uri-errors")).to_contain_text("not a file store")
    expect(page.get_by_label("Name", exact=True)).to_have_value("daily")
    ui.check("export-create-error")

    page.get_by_label("Target", exact=True).fill("")
    page.get_by_label("Fields").fill("user_id:user.id:long")
    page.get_by_role("button", name="Create export").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/exports/daily/$"))
    page.get_by_role("button", name="Run now").click()
    expect(page.get_by_role("cell", name="queued")).to_be_visible()
    assert ExportRun.objects.get(export__name="daily").state == "queued"
    ui.check("export-detail")

    page.get_by_role("navigation", name="Sections").get_by_role("link", name="Indexes").click()
    page.get_by_label("Name", exact=True).fill("by-user")
    page.get_by_label("Topic", exact=True).fill("orders")
    page.get_by_label("Fields").fill("user_id:user.id:long")
    page.get_by_role("button", name="Create index").click()
    expect(page).to_have_url(re.compile(r"/console/t/acme/indexes/by-user/$"))
    page.get_by_label("Value", exact=True).fill("7")
    page.get_by_role("button", name="Look up").click()
    expect(page.locator("#query-summary")).to_contain_text("0 from the index, 1 from scanning")
    expect(page.get_by_role("cell", name='{"user":{"id":7}}')).to_be_visible()
    ui.check("index-query")
