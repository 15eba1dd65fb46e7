"""/api/v1/exports: the tenant-scoped contract, each refusal with its typed error,
the quota, the audit, runs and progress."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.exports import services
from controlplane.exports.models import Export, ExportRun
from controlplane.quotas.models import Quota
from controlplane.tenants.models import Tenant
from controlplane.topics.models import PartitionAssignment
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import TenantScopedAPIContract, assert_error
from tests.controlplane.exports.support import SYSTEM, tiered_cluster, tiered_topic

_names = itertools.count()


class TestExportAPI(TenantScopedAPIContract):
    base_url = "/api/v1/exports"
    write_role = Role.DEVELOPER
    weak_role = Role.VIEWER
    delete_status = 204  # deleting an export is immediate (its files stay)

    @pytest.fixture(autouse=True)
    def _targets(self, settings: Any, tmp_path: Path) -> None:
        self.exports_root = tmp_path / "exports"
        settings.EXPORT_ALLOWED_URIS = [f"{self.exports_root}/{{tenant}}/"]
        self.store = tmp_path / "store"

    def prepare(self) -> None:
        self.cluster = tiered_cluster(self.store)
        tiered_topic(self.tenant)
        tiered_topic(self.other_tenant)

    def make_object(self, tenant: Tenant) -> str:
        export = services.create_export(
            tenant, name=f"export-{next(_names)}", topic="orders", actor=SYSTEM
        )
        return export.name

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {"tenant": tenant.slug, "name": "daily", "topic": "orders"}

    def update_payload(self) -> dict[str, Any]:
        return {"schedule_kind": "interval", "interval_minutes": 15, "partition_by": ["date"]}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["name"])

    def post(self, body: dict[str, Any], role: str = Role.DEVELOPER) -> Any:
        return self.client(role).post(self.url(), body, format="json")

    # -- beyond the contract -----------------------------------------------------------------
    def test_a_created_export_shows_its_declaration_progress_and_is_audited(self) -> None:
        fields = [{"name": "user_id", "path": "user.id", "type": "long"}]
        response = self.post(
            {"name": "clicks", "topic": "acme.orders", "fields": fields,
             "partition_by": ["date", "hour"], "schedule_kind": "cron", "cron": "*/15 * * * *"}
        )  # fmt: skip
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["tenant"] == "acme"
        assert body["topic"] == "acme.orders"
        assert body["target_uri"] == f"{self.exports_root}/acme/clicks"
        assert (body["fields"], body["partition_by"]) == (fields, ["date", "hour"])
        assert (body["schedule_kind"], body["cron"], body["enabled"]) == (
            "cron",
            "*/15 * * * *",
            True,
        )
        assert body["last_run"] is None
        assert body["progress"] == {
            "covered": {},
            "lag": {"acme.orders/0": 0, "acme.orders/1": 0},
            "lag_records": 0,
        }
        event = AuditEvent.objects.get(action="export.create")
        assert (event.tenant_slug, event.after["name"]) == ("acme", "clicks")

    def test_update_and_delete_are_audited(self) -> None:
        name = self.make_object(self.tenant)
        client = self.client(Role.DEVELOPER)
        assert client.patch(self.url(name), {"enabled": False}, format="json").status_code == 200
        event = AuditEvent.objects.get(action="export.update")
        assert (event.before["enabled"], event.after["enabled"]) == (True, False)
        assert client.delete(self.url(name)).status_code == 204
        assert AuditEvent.objects.filter(
            action="export.delete", object_repr=f"acme/{name}"
        ).exists()

    @pytest.mark.parametrize(
        ("change", "code", "field"),
        [
            ({"fields": [{"name": "aaa", "path": "a", "type": "uuid"}]}, "invalid", "fields"),
            ({"fields": [{"name": "aaa", "path": "a", "type": "long"}] * 2}, "invalid", "fields"),
            ({"fields": [{"name": "aaa", "path": ".".join("x" * 9), "type": "long"}]}, "invalid",
             "fields"),
            ({"fields": [{"name": "offset", "path": "o", "type": "long"}]}, "invalid", "fields"),
            ({"fields": {"name": "aaa"}}, "invalid", "fields"),
            ({"value_format": "raw", "fields": [{"name": "aaa", "path": "a", "type": "long"}]},
             "invalid", "fields"),
            ({"partition_by": ["hour", "date"]}, "invalid", "partition_by"),
            ({"partition_by": ["minute"]}, "invalid", "partition_by"),
            ({"schedule_kind": "interval"}, "invalid", "interval_minutes"),
            ({"schedule_kind": "cron", "cron": "every day"}, "invalid", "cron"),
            ({"schedule_kind": "cron", "cron": "61 * * * *"}, "invalid", "cron"),
            ({"target_uri": "http://example.com/x"}, "target_not_allowed", "target_uri"),
            ({"target_uri": "exports/acme/x"}, "target_not_allowed", "target_uri"),
            ({"target_uri": "/tmp/elsewhere"}, "target_not_allowed", "target_uri"),
            ({"target_uri": "file:///etc/x"}, "target_not_allowed", "target_uri"),
            ({"target_uri": "s3://bucket/x"}, "target_not_allowed", "target_uri"),
            ({"topic": "nope"}, "invalid", "topic"),
        ],
    )  # fmt: skip
    def test_each_bad_input_is_its_typed_400(
        self, change: dict[str, Any], code: str, field: str
    ) -> None:
        body = {"name": "bad", "topic": "orders", **change}
        error = assert_error(self.post(body), 400, code)
        assert field in error["details"], error

    @pytest.mark.parametrize(
        "target",
        [
            "{root}/acme/../globex/x",
            "{root}/acme/./x",
            "{root}/acme//x",
            "file://host{root}/acme/x",
        ],
    )
    def test_a_target_escaping_or_oddly_written_is_refused(self, target: str) -> None:
        body = {
            "name": "bad",
            "topic": "orders",
            "target_uri": target.format(root=self.exports_root),
        }
        assert_error(self.post(body), 400, "target_not_allowed")

    def test_another_tenants_folder_is_not_allowed(self) -> None:
        body = {"name": "xyz", "topic": "orders", "target_uri": f"{self.exports_root}/globex/x"}
        assert_error(self.post(body), 400, "target_not_allowed")

    def test_file_uris_inside_the_allowed_folder_are_stored_as_paths(self) -> None:
        body = {
            "name": "xyz",
            "topic": "orders",
            "target_uri": f"file://{self.exports_root}/acme/x/",
        }
        response = self.post(body)
        assert response.status_code == 201, response.content
        assert response.json()["target_uri"] == f"{self.exports_root}/acme/x"

    def test_another_tenants_topic_is_answered_as_missing(self) -> None:
        error = assert_error(self.post({"name": "xyz", "topic": "globex.orders"}), 400, "invalid")
        assert "no topic" in error["details"]["topic"][0]

    def test_a_topic_without_remote_storage_is_refused_saying_why(self) -> None:
        create_topic(self.tenant, name="plain", partitions=1, actor=SYSTEM)
        error = assert_error(self.post({"name": "xyz", "topic": "plain"}), 400, "topic_not_tiered")
        assert "object store" in error["message"]

    def test_a_cluster_without_a_store_is_refused(self) -> None:
        tiered_topic(self.tenant, name="later")
        type(self.cluster).objects.filter(pk=self.cluster.pk).update(remote_store_uri="")
        error = assert_error(
            self.post({"name": "xyz", "topic": "later"}), 400, "cluster_without_store"
        )
        assert "object store" in error["message"]

    @pytest.mark.parametrize("second", ["{root}/acme/aaa", "{root}/acme/aaa/sub", "{root}/acme"])
    def test_overlapping_targets_are_refused(self, second: str) -> None:
        first = {"name": "aaa", "topic": "orders", "target_uri": f"{self.exports_root}/acme/aaa"}
        assert self.post(first).status_code == 201
        body = {
            "name": "bbb",
            "topic": "orders",
            "target_uri": second.format(root=self.exports_root),
        }
        error = assert_error(self.post(body), 400, "target_overlap")
        assert error["details"]["export"] == "aaa"

    def test_another_tenants_overlapping_target_is_refused_without_naming_it(
        self, settings: Any
    ) -> None:
        shared = self.exports_root / "shared"
        settings.EXPORT_ALLOWED_URIS = [*settings.EXPORT_ALLOWED_URIS, f"{shared}/"]
        services.create_export(self.other_tenant, name="secret-name", topic="orders",
                               target_uri=f"{shared}/lake", actor=SYSTEM)  # fmt: skip
        response = self.post({"name": "aaa", "topic": "orders", "target_uri": f"{shared}/lake/x"})
        error = assert_error(response, 400, "target_overlap")
        assert error["message"] == "target_uri: the target is in use"
        assert "export" not in error["details"]
        assert "secret-name" not in response.content.decode()
        assert "lake" not in error["message"]

    def test_a_sibling_target_is_fine(self) -> None:
        assert self.post({"name": "aaa", "topic": "orders"}).status_code == 201
        assert self.post({"name": "aaab", "topic": "orders"}).status_code == 201

    def test_a_name_in_use_is_409(self) -> None:
        assert self.post({"name": "aaa", "topic": "orders"}).status_code == 201
        body = {"name": "aaa", "topic": "orders", "target_uri": f"{self.exports_root}/acme/other"}
        assert_error(self.post(body), 409, "conflict")

    def test_an_export_past_max_exports_is_409_quota_exceeded(self) -> None:
        Quota.objects.filter(tenant=self.tenant).update(max_exports=1)
        assert self.post({"name": "aaa", "topic": "orders"}).status_code == 201
        error = assert_error(self.post({"name": "bbb", "topic": "orders"}), 409, "quota_exceeded")
        assert (error["details"]["quota"], error["details"]["limit"]) == ("max_exports", 1)
        usage = self.client(Role.VIEWER).get("/api/v1/quotas/acme").json()["usage"]
        assert usage["exports"] == 1

    def test_the_name_and_topic_cannot_change(self) -> None:
        name = self.make_object(self.tenant)
        response = self.client(Role.DEVELOPER).patch(self.url(name), {"topic": "x"}, format="json")
        assert response.status_code == 200  # not an input field: ignored, nothing changes
        assert response.json()["topic"] == "acme.orders"

    def test_a_run_is_queued_once_audited_and_listed(
        self, django_capture_on_commit_callbacks: Any
    ) -> None:
        name = self.make_object(self.tenant)
        client = self.client(Role.DEVELOPER)
        enqueued: list[tuple[int, int]] = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(services, "_enqueue", lambda e, r: enqueued.append((e, r)))
            with django_capture_on_commit_callbacks(execute=True):
                response = client.post(f"{self.url(name)}/runs")
            assert response.status_code == 202, response.content
            run = response.json()
            assert (run["state"], run["trigger"]) == ("queued", "manual")
            assert enqueued == [(Export.objects.get(name=name).pk, run["id"])]
            assert_error(client.post(f"{self.url(name)}/runs"), 409, "run_in_progress")
        assert AuditEvent.objects.filter(action="export.run").count() == 1
        listed = self.client(Role.VIEWER).get(f"{self.url(name)}/runs").json()
        assert [r["id"] for r in listed] == [run["id"]]
        assert_error(self.client(Role.VIEWER).post(f"{self.url(name)}/runs"), 403)

    def test_another_tenants_runs_are_404(self) -> None:
        theirs = self.make_object(self.other_tenant)
        client = self.client(Role.TENANT_ADMIN)
        assert_error(client.get(f"{self.url(theirs)}/runs"), 404, "not_found")
        assert_error(client.post(f"{self.url(theirs)}/runs"), 404, "not_found")

    def test_progress_is_the_last_succeeded_run_against_the_reported_end_offsets(self) -> None:
        name = self.make_object(self.tenant)
        export = Export.objects.get(name=name)
        PartitionAssignment.objects.filter(topic=export.topic, partition=0).update(
            log_end_offset=120
        )
        PartitionAssignment.objects.filter(topic=export.topic, partition=1).update(
            log_end_offset=80
        )
        ExportRun.objects.create(export=export, state="succeeded", rows=150,
                                 covered={"acme.orders/0": 100, "acme.orders/1": 50})  # fmt: skip
        ExportRun.objects.create(export=export, state="failed", error="boom")
        body = self.client(Role.VIEWER).get(self.url(name)).json()
        assert body["progress"] == {
            "covered": {"acme.orders/0": 100, "acme.orders/1": 50},
            "lag": {"acme.orders/0": 20, "acme.orders/1": 30},
            "lag_records": 50,
        }
        assert (body["last_run"]["state"], body["last_run"]["error"]) == ("failed", "boom")

    def test_listing_stays_within_a_bounded_number_of_queries(self) -> None:
        for _ in range(3):
            self.make_object(self.tenant)
        with CaptureQueriesContext(connection) as queries:
            response = self.client(Role.VIEWER).get(self.url())
        assert response.status_code == 200
        assert len(queries) < 40
