"""Exports and indexes end to end: the control plane's runs launch the real Spark jobs
(``spark.jobs.export`` and ``spark.jobs.index``, a JVM each, through the launcher and
the lifeline) on a tiered topic whose sealed segments tiered storage's own code uploaded,
and the Index Query answers through ``spark.query``, complete. The brokers' tail is
stood in for by the records the partition logs hold past the store's end (the real tail
reader is tested on a real broker in ``tests/controlplane/gateway/test_tail.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controlplane.exports import services, tasks
from controlplane.exports.models import ExportRun
from controlplane.indexes import services as index_services
from controlplane.indexes import tasks as index_tasks
from controlplane.indexes.building import index_spec
from controlplane.indexes.models import IndexBuild
from controlplane.indexes.query import parse_query, run_query
from controlplane.tenants.models import Tenant
from dataplane.records import Record
from dataplane.tiered.store import ObjectStore
from tests.controlplane.exports.support import SYSTEM, tiered_cluster, tiered_topic
from tests.spark.jobs.support import rows_of
from tests.spark.jobs.topics import TieredTopic, orders
from tests.support.controlplane import make_tenant

pytestmark = pytest.mark.slow

FIELDS = [
    {"name": "user", "path": "user.id", "type": "long"},
    {"name": "amount", "path": "amount", "type": "double"},
]


@dataclass
class World:
    tenant: Tenant
    parts: list[TieredTopic]

    def records(self) -> list[tuple[int, Record]]:
        """(partition, record) of every record appended, sealed or not."""
        return [(p.partition, r) for p in self.parts for r in p.records()]

    def tail(self, topic: str, partition: int, start: int) -> list[Record]:
        """The brokers' stand-in: what a partition log holds from ``start``."""
        assert topic == "acme.orders"
        return self.parts[partition].records(start)


@pytest.fixture
def world(db: None, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    settings.EXPORT_ALLOWED_URIS = [f"{tmp_path}/exports/{{tenant}}/"]
    settings.DATA_DIR = str(tmp_path / "data")
    settings.INDEX_ROOT = str(tmp_path / "indexes")
    monkeypatch.setattr(services, "_enqueue", lambda export_id, run_id: None)
    monkeypatch.setattr(index_services, "_enqueue_build", lambda index_id, build_id: None)
    tiered_cluster(tmp_path / "store")
    tenant = make_tenant("acme")
    topic = tiered_topic(tenant)
    store = ObjectStore.open(str(tmp_path / "store"))
    parts = []
    for partition in (0, 1):
        part = TieredTopic(store, tmp_path / "logs", "acme.orders", partition, str(topic.pk))
        part.produce(orders(partition * 700, 700))
        part.seal()
        part.produce(orders(5000 + partition * 20, 20))  # not sealed: the brokers' part
        parts.append(part)
    return World(tenant, parts)


def test_an_export_run_writes_each_sealed_record_once_and_a_rerun_adds_nothing(
    world: World,
) -> None:
    export = services.create_export(
        world.tenant, name="daily", topic="orders", fields=FIELDS, partition_by=["date"],
        actor=SYSTEM,
    )  # fmt: skip
    first = services.request_run(export, actor=SYSTEM)
    assert tasks.run_export(export.pk, first.pk) == "succeeded", _error(first)
    first.refresh_from_db()
    sealed = [(p.partition, r) for p in world.parts for r in p.records(0, p.store_end)]
    assert first.covered == {f"acme.orders/{p.partition}": p.store_end for p in world.parts}
    assert (first.rows, first.dead_letter_rows) == (len(sealed), 0)
    rows = rows_of(export.target_uri)
    assert [(r["partition"], r["offset"]) for r in rows] == [(p, r.offset) for p, r in sealed]
    assert [(r["user"], r["amount"]) for r in rows] == [
        (json.loads(r.value)["user"]["id"], json.loads(r.value)["amount"]) for _, r in sealed
    ]
    files = sorted(Path(export.target_uri).rglob("*.parquet"))
    assert all(f.parent.name.startswith("date=") for f in files)

    again = services.request_run(export, actor=SYSTEM)
    assert tasks.run_export(export.pk, again.pk) == "succeeded", _error(again)
    again.refresh_from_db()
    assert (again.rows, again.covered) == (0, first.covered)
    assert sorted(Path(export.target_uri).rglob("*.parquet")) == files
    assert rows_of(export.target_uri) == rows


def test_an_index_build_answers_queries_equal_to_a_scan_of_the_whole_topic(
    world: World,
) -> None:
    index = index_services.create_index(
        world.tenant, name="by-user", topic="orders", fields=FIELDS[:1], actor=SYSTEM
    )
    build = index_services.request_build(index, actor=SYSTEM)
    assert index_tasks.build_index(index.pk, build.pk) == "succeeded", _error(build)
    spec = index_spec(index)
    for user in (3, 6):
        query = parse_query({"user": str(user), "limit": "1000"}, ["user"])
        answer = run_query(spec, query, world.tail, index_services.query_partitions(index))
        wanted = sorted(
            ((r.timestamp, p, r.offset) for p, r in world.records()
             if json.loads(r.value)["user"]["id"] == user),
        )  # fmt: skip
        got = [(r["timestamp"], r["partition"], r["offset"]) for r in answer["records"]]
        assert got == wanted
        unsealed = [w for w in wanted if w[2] >= world.parts[w[1]].store_end]
        assert (answer["from_index"], answer["from_scan"]) == (
            len(wanted) - len(unsealed),
            len(unsealed),
        )
        assert unsealed
        assert answer["next_cursor"] is None


def _error(run: ExportRun | IndexBuild) -> str:
    run.refresh_from_db()
    return run.error
