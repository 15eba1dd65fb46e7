"""/api/v1/mirrors: the tenant-scoped contract, the typed refusals as HTTP answers,
partitions and lag, pausing, the failover endpoint; the tenants' regions."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from controlplane.core.choices import Role
from controlplane.mirrors import progress, services
from controlplane.mirrors.models import MirrorWorker
from controlplane.tenants.models import Tenant
from tests.controlplane.api_base import TenantScopedAPIContract, assert_error
from tests.controlplane.mirrors.support import (
    link,
    mirror_tenant,
    region,
    topic,
    two_regions,
)

_names = itertools.count()


class TestMirrorAPI(TenantScopedAPIContract):
    base_url = "/api/v1/mirrors"
    write_role = Role.DEVELOPER
    weak_role = Role.VIEWER
    delete_status = 202

    def prepare(self) -> None:
        two_regions()
        for tenant in (self.tenant, self.other_tenant):
            tenant.home_region = region("east")
            tenant.save()
            tenant.regions.set([region("west")])
            topic(tenant, name="orders")

    def make_object(self, tenant: Tenant) -> str:
        return link(tenant, name=f"link-{next(_names)}", topics=[], topic_pattern="orders").name

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {
            "tenant": tenant.slug, "name": "to-west", "source_region": "east",
            "target_region": "west", "topics": ["orders"],
        }  # fmt: skip

    def update_payload(self) -> dict[str, Any]:
        return {"paused": True}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["name"])

    def post(self, body: dict[str, Any], role: str = Role.DEVELOPER) -> Any:
        payload = {**self.create_payload(self.tenant), **body}
        return self.client(role).post(self.url(), payload, format="json")

    # -- beyond the contract -----------------------------------------------------------------
    def test_a_created_link_shows_its_declaration_and_the_copy_its_origin(self) -> None:
        response = self.post({"direction": "two-way", "start_position": "latest"})
        assert response.status_code == 201, response.content
        body = response.json()
        assert (body["tenant"], body["source_region"], body["target_region"]) == (
            "acme", "east", "west",
        )  # fmt: skip
        assert (body["direction"], body["topics"], body["topic_pattern"]) == (
            "two-way", ["orders"], "",
        )  # fmt: skip
        # latest is resolved once, to the time the link was made
        assert body["start_position"] == "latest"
        assert isinstance(body["start_timestamp_ms"], int)
        assert body["start_timestamp_ms"] > 0
        assert (body["status"], body["health"], body["paused"]) == ("provisioning", "starting",
                                                                    False)  # fmt: skip
        assert (body["partitions"], body["lag_records"], body["lag_seconds"]) == ([], 0, 0.0)
        viewer = self.client(Role.VIEWER)
        origin = viewer.get("/api/v1/topics/acme.orders").json()
        copy = viewer.get("/api/v1/topics/acme.orders", {"region": "west"}).json()
        assert (origin["region"], origin["mirror_of"], origin["mirror_link"]) == (
            "east", None, None,
        )  # fmt: skip
        assert (copy["region"], copy["mirror_of"], copy["mirror_link"]) == (
            "west", "east", "to-west",
        )  # fmt: skip
        listed = viewer.get("/api/v1/topics", {"region": "west"}).json()["results"]
        assert [(t["full_name"], t["mirror_of"]) for t in listed] == [("acme.orders", "east")]
        copies = viewer.get("/api/v1/topics", {"mirror_copy": "true"}).json()["results"]
        assert [t["region"] for t in copies] == ["west"]

    @pytest.mark.parametrize(
        ("body", "code"),
        [
            ({"target_region": "east"}, "same_region"),
            ({"target_region": "nowhere"}, "region_not_allowed"),
            ({"topics": ["globex.orders"]}, "topic_not_found"),
            ({"topics": ["nothing"]}, "topic_not_found"),
            ({"topic_pattern": "orders"}, "topics_or_pattern"),
            ({"topics": [], "topic_pattern": "a\tb"}, "invalid_pattern"),
            ({"start_position": "timestamp"}, "invalid"),
            ({"direction": "sideways"}, "invalid"),
        ],
    )
    def test_bad_input_is_a_typed_400(self, body: dict[str, Any], code: str) -> None:
        error = assert_error(self.post(body), 400, code)
        assert error["details"]

    def test_another_tenants_topic_answers_exactly_like_a_missing_one(self) -> None:
        theirs = self.post({"topics": ["globex.orders"]}).json()["error"]
        missing = self.post({"topics": ["nothing"]}).json()["error"]
        assert theirs["message"].replace("globex.orders", "?") == missing["message"].replace(
            "nothing", "?"
        )

    def test_a_target_topic_the_link_did_not_make_is_a_400(self) -> None:
        assert self.post({}).status_code == 201
        assert_error(self.post({"name": "again"}), 400, "target_topic_exists")

    def test_a_name_in_use_is_409_and_the_mirror_quota_too(self) -> None:
        assert self.post({}).status_code == 201
        assert_error(self.post({"topics": [], "topic_pattern": "x*"}), 409, "conflict")
        self.tenant.quota.max_mirrors = 1
        self.tenant.quota.save()
        response = self.post({"name": "second", "topics": [], "topic_pattern": "x*"})
        assert_error(response, 409, "quota_exceeded")

    def test_pause_resume_and_partitions_with_lag(self) -> None:
        name = self.make_object(self.tenant)
        client = self.client(Role.DEVELOPER)
        paused = client.patch(self.url(name), {"paused": True}, format="json").json()
        assert (paused["paused"], paused["health"]) == (True, "paused")
        resumed = client.patch(self.url(name), {"paused": False}, format="json").json()
        assert (resumed["paused"], resumed["health"]) == (False, "starting")
        link_row = services.MirrorLink.objects.get(name=name)
        worker = MirrorWorker.objects.create(
            link=link_row, from_region=region("east"), to_region=region("west"), generation=1
        )
        status = {
            "link_id": link_row.pk, "generation": 1,
            "partitions": [
                {"source_topic": "acme.orders", "target_topic": "acme.orders", "partition": p,
                 "state": "copying", "next_source_offset": 10, "source_end_offset": 10 + p,
                 "lag_records": p, "lag_seconds": p / 2}
                for p in range(3)
            ],
            "points": [],
        }  # fmt: skip
        assert progress.record_status(worker, status)
        body = client.get(self.url(name)).json()
        assert (body["lag_records"], body["lag_seconds"]) == (3, 1.0)
        rows = client.get(self.url(name) + "/partitions").json()
        assert rows == body["partitions"]
        assert [(r["from_region"], r["to_region"], r["partition"], r["lag_records"])
                for r in rows] == [("east", "west", p, p) for p in range(3)]  # fmt: skip

    def test_region_filter_lists_links_on_either_side(self) -> None:
        name = self.make_object(self.tenant)
        client = self.client(Role.VIEWER)
        for where, expected in (("east", [name]), ("west", [name]), ("north", [])):
            listed = client.get(self.url(), {"region": where}).json()["results"]
            assert [row["name"] for row in listed] == expected

    def test_deleting_answers_deleting_and_keeps_the_copy(self) -> None:
        name = self.make_object(self.tenant)
        response = self.client(Role.DEVELOPER).delete(self.url(name))
        assert response.status_code == 202
        assert response.json()["status"] == "deleting"
        assert services.finish_deletion(services.MirrorLink.objects.get(name=name))
        assert self.client(Role.VIEWER).get(self.url(name)).status_code == 404
        copy = self.client(Role.VIEWER).get("/api/v1/topics/acme.orders?region=west").json()
        assert (copy["mirror_of"], copy["mirror_link"]) == ("east", None)

    def test_failover_group_refuses_bad_input_and_needs_the_brokers(self) -> None:
        """The translation itself is tested end to end (tests/integration/mirror)."""
        name = self.make_object(self.tenant)
        client = self.client(Role.DEVELOPER)
        url = self.url(name) + "/failover-group"
        assert_error(client.post(url, {}, format="json"), 400, "invalid")
        response = client.post(url, {"group": "acme.g", "to_region": "north"}, format="json")
        assert_error(response, 400, "invalid")
        response = client.post(url, {"group": "other.g", "to_region": "west"}, format="json")
        assert_error(response, 404, "not_found")
        response = client.post(url, {"group": "acme.g", "to_region": "west"}, format="json")
        assert_error(response, 503, "unavailable")  # no broker runs here
        assert "127.0.0.1" not in response.content.decode()  # nor its address
        viewer = self.client(Role.VIEWER)
        response = viewer.post(url, {"group": "acme.g", "to_region": "west"}, format="json")
        assert_error(response, 403, "permission_denied")


@pytest.mark.django_db
def test_platform_admins_set_a_tenants_regions(admin_client: Any, client_for: Any) -> None:
    two_regions()
    tenant = mirror_tenant()
    response = admin_client.patch(f"/api/v1/tenants/{tenant.slug}", {"regions": ["west"]},
                                  format="json")  # fmt: skip
    assert response.status_code == 200, response.content
    assert (response.json()["home_region"], response.json()["regions"]) == ("east", ["west"])
    cleared = admin_client.patch(f"/api/v1/tenants/{tenant.slug}", {"regions": []}, format="json")
    assert cleared.json()["regions"] == []
    member = client_for(roles={"acme": Role.TENANT_ADMIN})
    refused = member.patch(f"/api/v1/tenants/{tenant.slug}", {"regions": ["west"]}, format="json")
    assert refused.status_code == 403
    assert_error(
        admin_client.patch(f"/api/v1/tenants/{tenant.slug}", {"regions": ["nowhere"]},
                           format="json"),
        400,
    )  # fmt: skip
