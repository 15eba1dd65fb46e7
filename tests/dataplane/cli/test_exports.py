"""``meridian exports``, ``meridian indexes`` and ``meridian index query`` against a real
control plane (pytest-django's live server), as ``meridian lanes`` is tested: tables
and ``--json``, refusals printed with their field messages and exit code 1, another
tenant's objects answering like missing ones. The Index Query's Spark side is stood in
for at its one seam (``controlplane.indexes.query.spark_query_index``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controlplane.accounts.identity import LocalIdentity
from controlplane.exports import services as export_services
from controlplane.exports.models import Export, ExportRun
from controlplane.indexes import query as index_query
from controlplane.indexes import services as index_services
from controlplane.indexes.models import Index
from controlplane.tenants.models import Tenant
from tests.controlplane.conftest import local_identity, token_for
from tests.controlplane.exports.support import SYSTEM, tiered_cluster, tiered_topic
from tests.controlplane.indexes.test_api import FakeAnswer, FakeRecord
from tests.dataplane.cli.test_lanes import Meridian
from tests.support.controlplane import make_tenant

__all__ = ["local_identity"]


@pytest.fixture
def acme(transactional_db: None, tmp_path: Path, settings: Any) -> Tenant:
    settings.EXPORT_ALLOWED_URIS = [f"{tmp_path}/exports/{{tenant}}/"]
    settings.INDEX_ROOT = str(tmp_path / "indexes")
    cluster = tiered_cluster(tmp_path / "store")
    globex = make_tenant("globex", region=cluster.region)
    tenant = make_tenant("acme", region=cluster.region)
    tiered_topic(tenant)
    tiered_topic(globex)
    return tenant


@pytest.fixture
def meridian(live_server: Any, local_identity: LocalIdentity, acme: Tenant) -> Any:
    def as_role(role: str = "developer") -> Meridian:
        return Meridian(live_server.url, token_for(local_identity, roles={"acme": role}))

    return as_role


@pytest.fixture(autouse=True)
def _no_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs and builds are queued, not run (their tasks are tested in tests/controlplane)."""
    monkeypatch.setattr(export_services, "_enqueue", lambda e, r: None)
    monkeypatch.setattr(index_services, "_enqueue_build", lambda i, b: None)
    monkeypatch.setattr(index_services, "_enqueue_file_deletion", lambda t, i: None)


def test_exports_create_list_describe_run_delete(
    meridian: Any, acme: Tenant, tmp_path: Path
) -> None:
    cli = meridian("developer")
    created = cli.ok(
        "exports", "create", "orders-daily", "--topic", "orders",
        "--field", "user_id:user.id:long", "--partition-by", "date", "--every-minutes", "30",
    )  # fmt: skip
    target = f"{tmp_path}/exports/acme/orders-daily"
    assert created.stdout.split() == (
        f"created export orders-daily of acme.orders to {target} (every 30 min)".split()
    )
    export = Export.objects.get(name="orders-daily")
    assert (export.fields, export.partition_by) == (
        [{"name": "user_id", "path": "user.id", "type": "long"}], ["date"],
    )  # fmt: skip
    listed = cli.ok("exports", "list").stdout.splitlines()
    assert listed[0].split()[:3] == ["export", "tenant", "topic"]
    assert listed[1].split()[:3] == ["orders-daily", "acme", "acme.orders"]
    assert cli.ok("exports", "run", "orders-daily").stdout.startswith("queued run ")
    assert ExportRun.objects.get(export=export).state == "queued"
    described = cli.ok("exports", "describe", "orders-daily").stdout
    assert "user_id:user.id:long" in described
    assert "queued" in described
    as_json = json.loads(cli.ok("exports", "describe", "orders-daily", "--json").stdout)
    assert [r["state"] for r in as_json["runs"]] == ["queued"]
    assert (
        cli.ok("exports", "delete", "orders-daily").stdout.strip() == "deleted export orders-daily"
    )
    assert not Export.objects.exists()


def test_export_refusals_are_printed_with_their_fields(meridian: Any) -> None:
    cli = meridian("developer")
    lines = cli.refused("exports", "create", "bad", "--topic", "orders", "--target", "http://x/y")
    assert lines[0].startswith("error: target_not_allowed: ")
    assert any(line.startswith("  target_uri: ") for line in lines[1:])
    lines = cli.refused("exports", "create", "bad", "--topic", "orders", "--field", "oops")
    assert "NAME:PATH:TYPE" in lines[0]
    assert cli.refused("exports", "describe", "nope")[0].startswith("error: not_found")
    viewer = meridian("viewer")
    assert viewer.refused("exports", "create", "x-y-z", "--topic", "orders")[0].startswith(
        "error: permission_denied"
    )


def test_another_tenants_export_is_not_found(meridian: Any) -> None:
    globex = Tenant.objects.get(slug="globex")
    export_services.create_export(globex, name="theirs", topic="orders", actor=SYSTEM)
    cli = meridian("tenant-admin")
    for command in ("describe", "run", "delete"):
        assert cli.refused("exports", command, "theirs")[0].startswith("error: not_found")


def test_indexes_create_list_describe_build_delete(meridian: Any) -> None:
    cli = meridian("developer")
    created = cli.ok(
        "indexes", "create", "by-user", "--topic", "orders",
        "--field", "user_id:user.id:long", "--field", "country:country:string",
    )  # fmt: skip
    assert created.stdout.split() == [
        "created",
        "index",
        "by-user",
        "of",
        "acme.orders",
        "on",
        "user_id:user.id:long,",
        "country:country:string",
    ]
    listed = cli.ok("indexes", "list").stdout.splitlines()
    assert listed[1].split()[:3] == ["by-user", "acme", "acme.orders"]
    assert cli.ok("indexes", "build", "by-user").stdout.startswith("queued build ")
    described = json.loads(cli.ok("indexes", "describe", "by-user", "--json").stdout)
    assert [b["state"] for b in described["builds"]] == ["queued"]
    lines = cli.refused("indexes", "create", "no-fields", "--topic", "orders")
    assert lines[0].startswith("error: invalid: ")
    assert cli.ok("indexes", "delete", "by-user").stdout.strip() == "deleted index by-user"
    assert not Index.objects.exists()


def test_index_query_prints_records_and_where_they_came_from(
    meridian: Any, acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_services.create_index(
        acme, name="by-user", topic="orders",
        fields=[{"name": "user_id", "path": "user.id", "type": "long"}], actor=SYSTEM,
    )  # fmt: skip
    asked: list[dict[str, Any]] = []

    def query_index(spec: Any, **kwargs: Any) -> FakeAnswer:
        asked.append(kwargs)
        record = FakeRecord("acme.orders", 1, 7, 1_700_000_000_000, b"k", b'{"user":{"id":42}}',
                            (), None)  # fmt: skip
        return FakeAnswer([record], 0, 1, "c2", {"acme.orders/1": 3})

    monkeypatch.setattr(index_query, "spark_query_index", query_index)
    cli = meridian("viewer")
    out = cli.ok(
        "index", "query", "by-user", "--field", "user_id", "--value", "42", "--limit", "10",
        "--from", "1700000000000", "--to", "1700000000001",
    ).stdout.splitlines()  # fmt: skip
    assert out[1].split()[:4] == ["acme.orders", "1", "7", "1700000000000"]
    assert '{"user":{"id":42}}' in out[1]
    assert "0 from the index, 1 from scanning" in " ".join(out)
    assert "--cursor c2" in out[-1]
    assert (asked[0]["value"], asked[0]["limit"], asked[0]["from_ms"], asked[0]["to_ms"]) == (
        "42",
        10,
        1_700_000_000_000,
        1_700_000_000_001,
    )
    assert asked[0]["partitions"] == {"acme.orders": [0, 1]}
    lines = cli.refused(
        "index", "query", "by-user", "--field", "user_id", "--value", "42",
        "--from", "1700000000000", "--to", "1700000000000",
    )  # fmt: skip
    assert lines[0] == "error: invalid_query: from: before to (to is exclusive)"
    assert "exclusive" in cli.ok("index", "query", "--help").stdout
    lines = cli.refused("index", "query", "by-user", "--field", "plan", "--value", "gold")
    assert lines[0].startswith("error: unknown_field: ")
