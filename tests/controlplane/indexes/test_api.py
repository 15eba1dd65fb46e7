"""/api/v1/indexes: the tenant-scoped contract, the refusals, builds, and the Index
Query answered through the Spark side's ``query_index`` (stood in for here by a fake at
the one seam, ``controlplane.indexes.query.spark_query_index``)."""

from __future__ import annotations

import base64
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.exports import jobs
from controlplane.indexes import building, services
from controlplane.indexes import query as index_query
from controlplane.indexes.models import Index, IndexBuild
from controlplane.quotas.models import Quota
from controlplane.tenants.models import Tenant
from controlplane.topics.services import create_topic
from spark.jobs.spec import IndexSpec
from spark.query import UncoveredTooLargeError
from tests.controlplane.api_base import TenantScopedAPIContract, assert_error
from tests.controlplane.exports.support import SYSTEM, tiered_cluster, tiered_topic

_names = itertools.count()
FIELDS = [
    {"name": "user_id", "path": "user.id", "type": "long"},
    {"name": "country", "path": "country", "type": "string"},
]


@dataclass(frozen=True)
class FakeRecord:
    """``spark.query.IndexedRecord``'s shape."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    lane: str | None


@dataclass(frozen=True)
class FakeAnswer:
    """``spark.query.QueryAnswer``'s shape."""

    records: list[FakeRecord]
    from_index: int
    from_scan: int
    next_cursor: str | None
    covered: dict[str, int]


class FakeQueryIndexError(ValueError):
    """``spark.query.IndexQueryError`` (a ``ValueError``)."""


class TestIndexAPI(TenantScopedAPIContract):
    base_url = "/api/v1/indexes"
    write_role = Role.DEVELOPER
    weak_role = Role.VIEWER
    delete_status = 204

    @pytest.fixture(autouse=True)
    def _roots(self, settings: Any, tmp_path: Path) -> None:
        settings.INDEX_ROOT = str(tmp_path / "indexes")
        self.store = tmp_path / "store"

    def prepare(self) -> None:
        self.cluster = tiered_cluster(self.store)
        tiered_topic(self.tenant)
        tiered_topic(self.other_tenant)

    def make_object(self, tenant: Tenant) -> str:
        index = services.create_index(
            tenant, name=f"index-{next(_names)}", topic="orders", fields=FIELDS, actor=SYSTEM
        )
        return index.name

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {"tenant": tenant.slug, "name": "by-user", "topic": "orders", "fields": FIELDS}

    def update_payload(self) -> dict[str, Any]:
        return {"description": "orders by user and country"}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["name"])

    def post(self, body: dict[str, Any]) -> Any:
        return self.client(Role.DEVELOPER).post(self.url(), body, format="json")

    # -- beyond the contract -----------------------------------------------------------------
    def test_a_created_index_is_shown_and_audited(self) -> None:
        response = self.post({"name": "by-user", "topic": "acme.orders", "fields": FIELDS})
        assert response.status_code == 201, response.content
        body = response.json()
        assert (body["topic"], body["fields"], body["value_format"]) == (
            "acme.orders", FIELDS, "json",
        )  # fmt: skip
        assert body["progress"]["lag"] == {"acme.orders/0": 0, "acme.orders/1": 0}
        assert AuditEvent.objects.get(action="index.create").after["name"] == "by-user"

    @pytest.mark.parametrize(
        ("change", "code", "field"),
        [
            ({"fields": []}, "invalid", "fields"),
            ({"fields": [{"name": f"f{i}", "path": "a", "type": "long"} for i in range(9)]},
             "invalid", "fields"),
            ({"fields": [{"name": "aaa", "path": "a", "type": "binary"}]}, "invalid", "fields"),
            ({"fields": [{"name": "aaa", "path": "a b", "type": "long"}]}, "invalid", "fields"),
            ({"fields": [{"name": "aaa", "path": "a", "type": "long", "x": 1}]}, "invalid",
             "fields"),
            ({"fields": [{"name": "from", "path": "a", "type": "long"}]}, "invalid", "fields"),
            ({"fields": [{"name": "limit", "path": "a", "type": "long"}]}, "invalid", "fields"),
            ({"value_format": "raw"}, "invalid", "value_format"),
            ({"topic": "globex.orders"}, "invalid", "topic"),
        ],
    )  # fmt: skip
    def test_each_bad_input_is_its_typed_400(
        self, change: dict[str, Any], code: str, field: str
    ) -> None:
        body = {"name": "bad", "topic": "orders", "fields": FIELDS, **change}
        error = assert_error(self.post(body), 400, code)
        assert field in error["details"], error

    def test_a_topic_without_remote_storage_is_refused(self) -> None:
        create_topic(self.tenant, name="plain", partitions=1, actor=SYSTEM)
        body = {"name": "bad", "topic": "plain", "fields": FIELDS}
        assert_error(self.post(body), 400, "topic_not_tiered")

    def test_an_index_past_max_indexes_is_409_quota_exceeded(self) -> None:
        Quota.objects.filter(tenant=self.tenant).update(max_indexes=0)
        error = assert_error(self.post(self.create_payload(self.tenant)), 409, "quota_exceeded")
        assert error["details"]["quota"] == "max_indexes"

    @pytest.mark.parametrize("name", sorted(index_query.RESERVED_PARAMS))
    def test_a_field_named_as_a_query_parameter_is_refused(self, name: str) -> None:
        """The query could never name such a field: it would be read as the parameter."""
        fields = [*FIELDS, {"name": name, "path": "a", "type": "string"}]
        error = assert_error(self.post({"name": "bad", "topic": "orders", "fields": fields}),
                             400, "invalid")  # fmt: skip
        assert f"name {name!r} is reserved" in str(error["details"]["fields"])

    def test_fields_cannot_change(self) -> None:
        name = self.make_object(self.tenant)
        index = Index.objects.get(name=name)
        with pytest.raises(services.InvalidRequest):
            services.update_index(index, fields=FIELDS[:1], actor=SYSTEM)

    def test_the_files_go_where_the_platform_puts_them_by_ids(self, settings: Any) -> None:
        index = Index.objects.get(name=self.make_object(self.tenant))
        spec = building.index_spec(index)
        assert spec.target_uri == f"{settings.INDEX_ROOT}/{self.tenant.pk}/{index.pk}"
        assert spec.store_uri == str(self.store)
        assert [f.name for f in spec.fields] == ["user_id", "country"]
        settings.INDEX_ROOT = "var/somewhere"
        assert building.index_spec(index).target_uri == (
            f"{Path('var/somewhere').resolve()}/{self.tenant.pk}/{index.pk}"
        )

    def test_deleting_an_index_deletes_its_files_after_commit(
        self, settings: Any, django_capture_on_commit_callbacks: Any
    ) -> None:
        index = Index.objects.get(name=self.make_object(self.tenant))
        folder = Path(settings.INDEX_ROOT) / str(self.tenant.pk) / str(index.pk)
        (folder / "_manifest").mkdir(parents=True)
        (folder / "_manifest" / "v1.json").write_text("{}")
        deleted: list[tuple[int, int]] = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(services, "_enqueue_file_deletion", lambda t, i: deleted.append((t, i)))
            with django_capture_on_commit_callbacks(execute=True):
                services.delete_index(index, actor=SYSTEM)
        assert deleted == [(self.tenant.pk, index.pk)]
        assert building.delete_index_files(*deleted[0]) == 1
        assert not (folder / "_manifest" / "v1.json").exists()
        assert building.delete_index_files(*deleted[0]) == 0  # again: nothing left, no error

    def test_a_build_is_queued_once_and_listed(
        self, django_capture_on_commit_callbacks: Any
    ) -> None:
        name = self.make_object(self.tenant)
        client = self.client(Role.DEVELOPER)
        queued: list[tuple[int, int]] = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(services, "_enqueue_build", lambda i, b: queued.append((i, b)))
            with django_capture_on_commit_callbacks(execute=True):
                response = client.post(f"{self.url(name)}/builds")
        assert response.status_code == 202, response.content
        assert queued == [(Index.objects.get(name=name).pk, response.json()["id"])]
        assert_error(client.post(f"{self.url(name)}/builds"), 409, "run_in_progress")
        listed = client.get(f"{self.url(name)}/builds").json()
        assert [b["state"] for b in listed] == ["queued"]
        assert AuditEvent.objects.filter(action="index.build").count() == 1

    def test_a_build_runs_the_index_job(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
    ) -> None:
        """The Spark job is stood in for by a script at the launcher's seam."""
        from controlplane.exports import jobs
        from controlplane.indexes import tasks

        script = tmp_path / "fake_index_job.py"
        script.write_text(
            "import json, sys\n"
            "spec = json.load(open(sys.argv[sys.argv.index('--spec') + 1]))\n"
            "print(json.dumps({'status': 'succeeded', 'rows': 5, 'files': 1,"
            " 'covered': {spec['topic'] + '/0': 5}}))\n"
        )
        commands: list[str] = []

        def command(module: str, spec: Path) -> list[str]:
            commands.append(module)
            return [sys.executable, str(script), "--spec", str(spec)]

        monkeypatch.setattr(jobs, "job_command", command)
        monkeypatch.setattr(services, "_enqueue_build", lambda i, b: None)
        settings.DATA_DIR = str(tmp_path / "data")
        index = Index.objects.get(name=self.make_object(self.tenant))
        build = services.request_build(index, actor=SYSTEM)
        assert tasks.build_index(index.pk, build.pk) == "succeeded"
        assert commands == ["spark.jobs.index"]
        build = IndexBuild.objects.get(pk=build.pk)
        assert (build.rows, build.covered) == (5, {"acme.orders/0": 5})

    def test_an_index_deleted_while_its_build_runs_ends_the_build_quietly(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The build's row goes with the index: its outcome has nowhere to go."""
        from controlplane.indexes import tasks
        from spark.jobs.spec import JobResult

        index = Index.objects.get(name=self.make_object(self.tenant))

        def deleted_meanwhile(module: str, spec_json: str, *, timeout_s: float) -> JobResult:
            services.delete_index(index, actor=SYSTEM)
            return JobResult(status="succeeded", rows=5, covered={"acme.orders/0": 5})

        monkeypatch.setattr(jobs, "run_job", deleted_meanwhile)
        monkeypatch.setattr(services, "_enqueue_build", lambda i, b: None)
        build = services.request_build(index, actor=SYSTEM)
        assert tasks.build_index(index.pk, build.pk) is None
        assert not IndexBuild.objects.exists()

    # -- the Index Query ---------------------------------------------------------------------
    def fake_query(self, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
        """Stands in for ``spark.query.query_index``; returns the calls it got."""
        calls: list[dict[str, Any]] = []

        def query_index(spec: IndexSpec, **kwargs: Any) -> FakeAnswer:
            calls.append({"spec": spec, **kwargs})
            if kwargs["value"] == "not-a-number":
                raise FakeQueryIndexError("user_id: not a long: 'not-a-number'")
            if kwargs["value"] == "past-int64":  # as pyarrow says a value past its types
                raise OverflowError("Python int too large to convert to C long")
            if kwargs["value"] == "far-behind":
                raise UncoveredTooLargeError(70_000_000, 64 * 1024 * 1024)
            records = [
                FakeRecord("acme.orders", 0, 4, 1_700_000_000_000, b"k", b'{"user":{"id":42}}',
                           (("h", b"\x00\xff"), ("n", None)), None),
                FakeRecord("acme.orders~boe", 1, 9, 1_700_000_000_500, None, b"\xff\xfe", (),
                           "boe"),
            ]  # fmt: skip
            return FakeAnswer(records, 1, 1, "next-page", {"acme.orders/0": 5})

        monkeypatch.setattr(index_query, "spark_query_index", query_index)
        return calls

    def test_a_query_answers_records_with_where_they_came_from(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        calls = self.fake_query(monkeypatch)
        name = self.make_object(self.tenant)
        response = self.client(Role.VIEWER).get(
            f"{self.url(name)}/query",
            {"user_id": "42", "from": "1700000000000", "to": "2023-11-15T00:00:00Z", "limit": "5",
             "cursor": "abc"},
        )  # fmt: skip
        assert response.status_code == 200, response.content
        body = response.json()
        assert (body["from_index"], body["from_scan"], body["next_cursor"]) == (1, 1, "next-page")
        assert body["covered"] == {"acme.orders/0": 5}
        first, second = body["records"]
        assert first == {
            "topic": "acme.orders", "partition": 0, "offset": 4, "timestamp": 1_700_000_000_000,
            "lane": None, "key": base64.b64encode(b"k").decode(),
            "value": base64.b64encode(b'{"user":{"id":42}}').decode(),
            "value_text": '{"user":{"id":42}}',
            "headers": [{"key": "h", "value": "AP8="}, {"key": "n", "value": None}],
        }  # fmt: skip
        assert (second["value_text"], second["key"], second["lane"]) == (None, None, "boe")
        (call,) = calls
        assert (call["field"], call["value"], call["limit"], call["cursor"]) == (
            "user_id", "42", 5, "abc",
        )  # fmt: skip
        assert (call["from_ms"], call["to_ms"]) == (1_700_000_000_000, 1_700_006_400_000)
        assert call["spec"].topic == "acme.orders"
        assert callable(call["tail"])
        assert call["partitions"] == {"acme.orders": [0, 1]}

    def test_the_query_answers_for_every_partition_the_database_declares(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Also partitions nothing of which is in the object store yet (none here is):
        the topic's and, with include_lanes, its ready lane topics' (one that failed to
        be made is left out: no broker holds it)."""
        from controlplane.topics.choices import TopicStatus
        from controlplane.topics.models import Topic
        from controlplane.topics.services import create_lane_topic

        calls = self.fake_query(monkeypatch)
        trunk = Topic.objects.get(full_name="acme.orders")
        create_lane_topic(trunk, lane="boe", partitions=1, actor=SYSTEM)
        create_lane_topic(trunk, lane="bad", partitions=1, actor=SYSTEM)
        Topic.objects.filter(full_name="acme.orders~boe").update(status=TopicStatus.READY)
        Topic.objects.filter(full_name="acme.orders~bad").update(status=TopicStatus.FAILED)
        services.create_index(self.tenant, name="with-lanes", topic="orders", fields=FIELDS,
                              include_lanes=True, actor=SYSTEM)  # fmt: skip
        name = self.make_object(self.tenant)
        client = self.client(Role.VIEWER)
        for index in ("with-lanes", name):
            assert client.get(f"{self.url(index)}/query", {"user_id": "1"}).status_code == 200
        assert [c["partitions"] for c in calls] == [
            {"acme.orders": [0, 1], "acme.orders~boe": [0]},
            {"acme.orders": [0, 1]},
        ]

    @pytest.mark.parametrize(
        ("params", "code"),
        [
            ({}, "invalid_query"),
            ({"user_id": "1", "country": "fr"}, "invalid_query"),
            ({"plan": "gold"}, "unknown_field"),
            ({"user_id": "1", "limit": "0"}, "invalid_query"),
            ({"user_id": "1", "limit": "x"}, "invalid_query"),
            ({"user_id": "1", "from": "yesterday"}, "invalid_query"),
            ({"user_id": "1", "from": "20", "to": "10"}, "invalid_query"),
            ({"user_id": "1", "from": "10", "to": "10"}, "invalid_query"),  # to is exclusive
            ({"user_id": "1", "from": "\u00b9\u00b2"}, "invalid_query"),  # superscript digits
            ({"user_id": "1", "to": "\u00b2"}, "invalid_query"),
            ({"user_id": "1", "limit": "\u00b9"}, "invalid_query"),
            ({"user_id": "1", "from": "9999999999999999"}, "invalid_query"),  # past int64 µs
            ({"user_id": "1", "to": "-9999999999999999"}, "invalid_query"),
            ({"user_id": "not-a-number"}, "invalid_query"),
            ({"user_id": "past-int64"}, "invalid_query"),
        ],
    )
    def test_a_bad_query_is_its_typed_400(
        self, monkeypatch: pytest.MonkeyPatch, params: dict[str, str], code: str
    ) -> None:
        self.fake_query(monkeypatch)
        name = self.make_object(self.tenant)
        assert_error(self.client(Role.VIEWER).get(f"{self.url(name)}/query", params), 400, code)

    def test_a_query_past_what_it_may_scan_is_400_tail_too_large(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.fake_query(monkeypatch)
        name = self.make_object(self.tenant)
        url = f"{self.url(name)}/query"
        response = self.client(Role.VIEWER).get(url, {"user_id": "far-behind"})
        error = assert_error(response, 400, "tail_too_large")
        assert (error["details"]["bytes"], error["details"]["limit"]) == (70_000_000, 67_108_864)
        assert "build the index further first" in error["message"]

    def test_another_tenants_index_cannot_be_queried_or_built(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        calls = self.fake_query(monkeypatch)
        theirs = self.make_object(self.other_tenant)
        client = self.client(Role.TENANT_ADMIN)
        assert_error(client.get(f"{self.url(theirs)}/query", {"user_id": "1"}), 404, "not_found")
        assert_error(client.post(f"{self.url(theirs)}/builds"), 404, "not_found")
        assert calls == []

    def test_a_name_several_of_your_tenants_use_is_queried_with_tenant(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        calls = self.fake_query(monkeypatch)
        for tenant in (self.tenant, self.other_tenant):
            services.create_index(tenant, name="shared", topic="orders", fields=FIELDS,
                                  actor=SYSTEM)  # fmt: skip
        client = self.client_for(roles={"acme": Role.VIEWER, "globex": Role.VIEWER})
        url = f"{self.url('shared')}/query"
        assert_error(client.get(url, {"user_id": "1"}), 400, "invalid")
        assert client.get(url, {"user_id": "1", "tenant": "globex"}).status_code == 200
        assert calls[-1]["spec"].topic == "globex.orders"

    def test_the_tail_reader_reads_the_index_topics_only(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from controlplane.gateway.tail import TailRefused

        calls = self.fake_query(monkeypatch)
        name = self.make_object(self.tenant)
        self.client(Role.VIEWER).get(f"{self.url(name)}/query", {"user_id": "1"})
        with pytest.raises(TailRefused):
            list(calls[0]["tail"]("globex.orders", 0, 0))
