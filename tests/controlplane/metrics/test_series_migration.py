"""The migration that gives series their tenant, on the real Postgres: a series goes to
the tenant now holding its slug; one older than that tenant (a deleted namesake's) and
one whose slug no tenant holds are deleted with their blocks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

TENANTS = ("tenants", "0003_tenant_uid")
BEFORE = [("metrics", "0002_block_fillfactor"), TENANTS]
AFTER = [("metrics", "0005_series_tenant_required"), TENANTS]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def before_migration(transactional_db: None) -> Iterator[Any]:
    yield _migrate(BEFORE)
    _migrate(executor_leaves())


def executor_leaves() -> list[tuple[str, str]]:
    leaves: list[tuple[str, str]] = MigrationExecutor(connection).loader.graph.leaf_nodes()
    return leaves


def test_series_go_to_the_tenant_holding_their_slug_unless_older(before_migration: Any) -> None:
    apps = before_migration
    Tenant = apps.get_model("tenants", "Tenant")
    Series = apps.get_model("metrics", "Series")
    Block = apps.get_model("metrics", "Block")
    now = timezone.now()
    old = Series.objects.create(kind="topic", tenant_slug="phoenix", topic="phoenix.orders")
    Series.objects.filter(pk=old.pk).update(created_at=now - timedelta(days=2))
    Block.objects.create(series=old, resolution_s=60, start=now, records_per_s=[1.0])
    phoenix = Tenant.objects.create(slug="phoenix", name="Phoenix", status="ready")
    Tenant.objects.filter(pk=phoenix.pk).update(created_at=now - timedelta(days=1))
    kept = Series.objects.create(kind="topic", tenant_slug="phoenix", topic="phoenix.clicks")
    gone = Series.objects.create(kind="topic", tenant_slug="ghost", topic="ghost.orders")

    apps = _migrate(AFTER)

    Series = apps.get_model("metrics", "Series")
    assert list(Series.objects.values_list("pk", "tenant_id")) == [(kept.pk, phoenix.pk)]
    assert not apps.get_model("metrics", "Block").objects.exists()
    assert gone.pk not in set(Series.objects.values_list("pk", flat=True))
