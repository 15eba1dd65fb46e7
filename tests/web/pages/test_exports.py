"""Export and index pages: list with create, detail with progress and runs, run/build
now, delete typed; the API's messages on the form named by its fields; another tenant's
export or index a 404; the index query form with its results (the Spark side's
``query_index`` stood in for at its one seam, ``controlplane.indexes.query``)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.models import AuditEvent
from controlplane.exports import services as export_services
from controlplane.exports.models import Export, ExportRun
from controlplane.indexes import query as index_query
from controlplane.indexes import services as index_services
from controlplane.indexes.models import Index, IndexBuild
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from tests.controlplane.exports.support import SYSTEM, tiered_topic
from tests.controlplane.indexes.test_api import FakeAnswer, FakeRecord
from tests.web.pages.conftest import ConsoleFactory
from tests.web.pages.test_topics import field_errors

EXPORTS = "/console/t/acme/exports/"
INDEXES = "/console/t/acme/indexes/"
FIELDS = [{"name": "user_id", "path": "user.id", "type": "long"}]


@pytest.fixture(autouse=True)
def _tiered(
    cluster_rows: Cluster, acme: Tenant, globex: Tenant, settings: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    settings.EXPORT_ALLOWED_URIS = [f"{tmp_path}/exports/{{tenant}}/"]
    settings.INDEX_ROOT = str(tmp_path / "indexes")
    cluster_rows.remote_store_uri = str(tmp_path / "store")
    cluster_rows.save()
    tiered_topic(acme)
    tiered_topic(globex)
    monkeypatch.setattr(export_services, "_enqueue", lambda e, r: None)
    monkeypatch.setattr(index_services, "_enqueue_build", lambda i, b: None)
    monkeypatch.setattr(index_services, "_enqueue_file_deletion", lambda t, i: None)


@pytest.mark.parametrize("role", ["viewer", "developer"])
def test_every_role_reads_exports_and_writers_get_the_forms(
    role: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    export_services.create_export(acme, name="daily", topic="orders", actor=SYSTEM)
    client = console_for(roles={"acme": role})
    listing = client.get(EXPORTS).content.decode()
    assert f'<a href="{EXPORTS}daily/">daily</a>' in listing
    detail = client.get(f"{EXPORTS}daily/").content.decode()
    assert "acme.orders/0" in detail  # the progress table
    forms = ('id="create-name"' in listing, "Run now" in detail, 'name="confirm"' in detail)
    assert forms == (role != "viewer",) * 3


def test_the_nav_links_both_sections(acme: Tenant, console_for: ConsoleFactory) -> None:
    page = console_for(roles={"acme": "viewer"}).get(EXPORTS).content.decode()
    assert f'<a href="{EXPORTS}" aria-current="page">Exports</a>' in page
    assert f'<a href="{INDEXES}">Indexes</a>' in page


def test_a_developer_creates_runs_and_deletes_an_export(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    typed = {
        "name": "daily", "topic": "orders", "fields": "user_id:user.id:long\n",
        "partition_by": "date, hour", "schedule_kind": "cron", "cron": "0 3 * * *",
        "include_lanes": "true",
    }  # fmt: skip
    response = client.post(EXPORTS, typed)
    assert response.status_code == 302, response.content
    assert response["Location"] == f"{EXPORTS}daily/"
    export = Export.objects.get(tenant=acme, name="daily")
    assert (export.fields, export.partition_by, export.cron) == (
        FIELDS,
        ["date", "hour"],
        "0 3 * * *",
    )
    assert export.include_lanes
    assert client.post(f"{EXPORTS}daily/run/").status_code == 302
    assert ExportRun.objects.get(export=export).state == "queued"
    again = client.post(f"{EXPORTS}daily/run/")
    assert again.status_code == 409
    assert "already has a run" in again.content.decode()
    refused = client.post(f"{EXPORTS}daily/delete/", {"confirm": "nope"})
    assert refused.status_code == 422
    assert client.post(f"{EXPORTS}daily/delete/", {"confirm": "daily"}).status_code == 302
    assert not Export.objects.exists()
    assert AuditEvent.objects.filter(action__startswith="export.").count() == 3


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"fields": "user_id:user.id:uuid"}, "fields", "type: one of"),
        ({"fields": "just-a-name"}, "fields", "an object of exactly name, path and type"),
        ({"target_uri": "http://example.com/x"}, "target_uri", "not a file store"),
        ({"partition_by": "hour, date"}, "partition_by", "in that order"),
        ({"topic": "globex.orders"}, "topic", "no topic"),
    ],
)
def test_export_errors_appear_on_their_field(
    typed: dict[str, str], field: str, message: str, console_for: ConsoleFactory
) -> None:
    response = console_for(roles={"acme": "developer"}).post(
        EXPORTS, {"name": "daily", "topic": "orders", **typed}
    )
    assert response.status_code == 422
    errors = [html.unescape(m) for m in field_errors(response.content.decode(), field, "create-")]
    assert any(message in error for error in errors), errors
    assert not Export.objects.exists()


def test_another_tenants_export_and_index_are_404(
    globex: Tenant, console_for: ConsoleFactory
) -> None:
    export_services.create_export(globex, name="theirs", topic="orders", actor=SYSTEM)
    index_services.create_index(globex, name="theirs", topic="orders", fields=FIELDS, actor=SYSTEM)
    client = console_for(roles={"acme": "tenant-admin"})
    for url in (
        f"{EXPORTS}theirs/",
        f"{INDEXES}theirs/",
        f"{INDEXES}theirs/?field=user_id&value=1",
    ):
        assert client.get(url).status_code == 404
    assert client.post(f"{EXPORTS}theirs/run/").status_code == 404
    assert client.post(f"{INDEXES}theirs/build/").status_code == 404
    assert client.post(f"{EXPORTS}theirs/delete/", {"confirm": "theirs"}).status_code == 404
    assert Export.objects.filter(name="theirs").exists()


def test_a_developer_creates_builds_and_deletes_an_index(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    response = client.post(
        INDEXES, {"name": "by-user", "topic": "orders", "fields": "user_id:user.id:long"}
    )
    assert response.status_code == 302, response.content
    index = Index.objects.get(tenant=acme, name="by-user")
    assert index.fields == FIELDS
    assert client.post(f"{INDEXES}by-user/build/").status_code == 302
    assert IndexBuild.objects.get(index=index).state == "queued"
    refused = client.post(INDEXES, {"name": "none", "topic": "orders", "fields": ""})
    assert refused.status_code == 422
    assert any(
        "from 1 to 8" in e for e in field_errors(refused.content.decode(), "fields", "create-")
    )
    assert client.post(f"{INDEXES}by-user/delete/", {"confirm": "by-user"}).status_code == 302
    assert not Index.objects.exists()


def test_the_query_form_shows_records_and_where_they_came_from(
    acme: Tenant, console_for: ConsoleFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_services.create_index(acme, name="by-user", topic="orders", fields=FIELDS, actor=SYSTEM)

    def query_index(spec: Any, **kwargs: Any) -> FakeAnswer:
        record = FakeRecord("acme.orders", 0, 12, 1_700_000_000_000, None,
                            b'{"user":{"id":42}}', (), None)  # fmt: skip
        return FakeAnswer([record], 1, 0, "c2", {"acme.orders/0": 20})

    monkeypatch.setattr(index_query, "spark_query_index", query_index)
    client = console_for(roles={"acme": "viewer"})
    page = client.get(f"{INDEXES}by-user/", {"field": "user_id", "value": "42"}).content.decode()
    assert '<p id="query-summary">1 record: 1 from the index, 0 from scanning' in page
    assert "<td>12</td>" in page
    value = html.escape('{"user":{"id":42}}')
    assert f"<code>{value}</code>" in page
    assert "cursor=c2" in page
    refused = client.get(f"{INDEXES}by-user/", {"field": "user_id", "value": "1", "limit": "0"})
    assert refused.status_code == 422
    assert "limit: an integer from 1 to 1000" in refused.content.decode()
    assert "Epoch ms or ISO 8601 (UTC), exclusive; empty: now" in page
    empty = {"field": "user_id", "value": "1", "from": "1700000000000", "to": "1700000000000"}
    refused = client.get(f"{INDEXES}by-user/", empty)
    assert refused.status_code == 422
    assert "from: before to (to is exclusive)" in refused.content.decode()
