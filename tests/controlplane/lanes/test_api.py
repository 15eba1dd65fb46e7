"""/api/v1/lanes: the tenant-scoped contract, and what lanes refuse and show."""

from __future__ import annotations

import itertools
from typing import Any

from django.utils import timezone

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.lanes import services
from controlplane.lanes.models import Lane
from controlplane.quotas.models import Quota
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import TenantScopedAPIContract, assert_error, make_cluster

SYSTEM = Actor.system("tests")
_names = itertools.count()


class TestLaneAPI(TenantScopedAPIContract):
    base_url = "/api/v1/lanes"
    write_role = Role.DEVELOPER
    weak_role = Role.VIEWER
    delete_status = 204  # deleting a lane is immediate (its lane topics go through topics)

    def prepare(self) -> None:
        self.cluster = make_cluster("local")

    def make_object(self, tenant: Tenant) -> str:
        lane = services.create_lane(tenant, name=f"lane-{next(_names)}", actor=SYSTEM)
        return lane.name

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {"tenant": tenant.slug, "name": "ppe", "consume_trunk": True}

    def update_payload(self) -> dict[str, Any]:
        return {"consume_trunk": True, "orphan_policy": "hold", "ttl_s": 3600}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["name"])

    # -- beyond the contract -----------------------------------------------------------------
    def _topic(self, tenant: Tenant, name: str = "orders") -> Topic:
        return create_topic(tenant, name=name, partitions=2, actor=SYSTEM)  # type: ignore[no-any-return]

    def test_a_created_lane_shows_its_declaration_and_is_audited(self) -> None:
        self._topic(self.tenant)
        response = self.client(Role.DEVELOPER).post(
            self.url(), {"name": "boe-alice", "topics": ["orders"], "ttl_s": 600}, format="json"
        )
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["tenant"] == "acme"  # the caller's only tenant
        assert (body["all_topics"], body["topics"]) == (False, ["acme.orders"])
        assert (body["orphan_policy"], body["consume_trunk"]) == ("trunk", False)
        assert (body["ttl_s"], body["partitions"]) == (600, None)
        assert (body["lane_topics"], body["live_topics"], body["last_traffic_at"]) == ([], [], None)
        event = AuditEvent.objects.get(action="lane.create")
        assert event.tenant_slug == "acme"
        assert event.after["topics"] == ["acme.orders"]
        assert event.after["name"] == "boe-alice"

    def test_update_and_delete_are_audited(self) -> None:
        name = self.make_object(self.tenant)
        client = self.client(Role.DEVELOPER)
        assert client.patch(self.url(name), {"ttl_s": 60}, format="json").status_code == 200
        update = AuditEvent.objects.get(action="lane.update")
        assert (update.before["ttl_s"], update.after["ttl_s"]) == (7 * 24 * 3600, 60)
        assert client.patch(self.url(name), {"ttl_s": 60}, format="json").status_code == 200
        assert AuditEvent.objects.filter(action="lane.update").count() == 1  # no change
        assert client.delete(self.url(name)).status_code == 204
        assert AuditEvent.objects.get(action="lane.delete").before["name"] == name
        assert not Lane.objects.filter(name=name).exists()

    def test_a_lane_shows_its_lane_topics_and_what_the_brokers_reported(self) -> None:
        self._topic(self.tenant)
        lane = services.create_lane(self.tenant, name="ppe", partitions=1, actor=SYSTEM)
        services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
        Lane.objects.filter(pk=lane.pk).update(live_topics=["acme.orders"])
        body = self.client(Role.VIEWER).get(self.url("ppe")).json()
        assert [(t["name"], t["trunk"], t["partitions"]) for t in body["lane_topics"]] == [
            ("acme.orders~ppe", "acme.orders", 1)
        ]
        assert body["live_topics"] == ["acme.orders"]
        assert body["last_traffic_at"] is not None  # the demand was traffic

    def test_bad_names_are_400_naming_the_rule(self) -> None:
        client = self.client(Role.DEVELOPER)
        for bad in ["", "ab", "PPE", "p~e", "a--b", "-ab", "ab-", "x" * 33, "1ab", "a.b"]:
            response = client.post(self.url(), {"name": bad}, format="json")
            error = assert_error(response, 400, "invalid")
            assert "name" in error["details"], (bad, error)
        assert not Lane.objects.exists()

    def test_another_tenants_topic_is_answered_like_a_missing_one(self) -> None:
        self._topic(self.other_tenant, "orders")
        client = self.client(Role.DEVELOPER)
        theirs = client.post(
            self.url(), {"name": "ppe", "topics": ["globex.orders"]}, format="json"
        )
        missing = client.post(self.url(), {"name": "ppe", "topics": ["acme.nope"]}, format="json")
        theirs_error = assert_error(theirs, 400, "invalid")
        missing_error = assert_error(missing, 400, "invalid")
        assert set(theirs_error["details"]) == set(missing_error["details"]) == {"topics"}
        assert "no topic" in theirs_error["details"]["topics"][0]
        assert not Lane.objects.exists()

    def test_partitions_above_a_covered_trunks_count_are_400_naming_partitions(self) -> None:
        self._topic(self.tenant)  # 2 partitions
        client = self.client(Role.DEVELOPER)
        response = client.post(self.url(), {"name": "ppe", "partitions": 3}, format="json")
        assert "partitions" in assert_error(response, 400, "invalid")["details"]
        assert (
            client.post(self.url(), {"name": "ppe", "partitions": 2}, format="json").status_code
            == 201
        )
        response = client.patch(self.url("ppe"), {"partitions": 1024}, format="json")
        assert "partitions" in assert_error(response, 400, "invalid")["details"]
        assert Lane.objects.get(name="ppe").partitions == 2

    def test_a_lane_topic_cannot_be_named_as_a_covered_topic(self) -> None:
        self._topic(self.tenant)
        services.create_lane(self.tenant, name="ppe", actor=SYSTEM)
        services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
        response = self.client(Role.DEVELOPER).post(
            self.url(), {"name": "qa-team", "topics": ["acme.orders~ppe"]}, format="json"
        )
        assert "topics" in assert_error(response, 400, "invalid")["details"]

    def test_a_lane_past_max_lanes_is_409_quota_exceeded(self) -> None:
        Quota.objects.filter(tenant=self.tenant).update(max_lanes=1)
        client = self.client(Role.DEVELOPER)
        assert client.post(self.url(), {"name": "one"}, format="json").status_code == 201
        error = assert_error(client.post(self.url(), {"name": "two"}, format="json"), 409)
        assert error["code"] == "quota_exceeded"
        assert error["details"]["quota"] == "max_lanes"
        assert list(Lane.objects.values_list("name", flat=True)) == ["one"]

    def test_a_name_in_use_is_409(self) -> None:
        name = self.make_object(self.tenant)
        response = self.client(Role.DEVELOPER).post(self.url(), {"name": name}, format="json")
        assert_error(response, 409, "conflict")

    def test_deleting_a_lane_with_live_consumers_is_409_unless_forced(self) -> None:
        self._topic(self.tenant)
        lane = services.create_lane(self.tenant, name="ppe", actor=SYSTEM)
        topic = services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
        assert topic is not None
        Lane.objects.filter(pk=lane.pk).update(
            live_topics=["acme.orders"], last_live_at=timezone.now()
        )
        client = self.client(Role.DEVELOPER)
        error = assert_error(client.delete(self.url("ppe")), 409, "lane_in_use")
        assert error["details"]["live_topics"] == ["acme.orders"]
        assert Lane.objects.filter(pk=lane.pk).exists()
        assert Topic.objects.get(pk=topic.pk).status == "pending"  # untouched

        assert client.delete(self.url("ppe") + "?force=true").status_code == 204
        assert not Lane.objects.filter(pk=lane.pk).exists()
        assert Topic.objects.get(pk=topic.pk).status == "deleting"

    def test_a_lane_seen_live_lately_is_409_too(self) -> None:
        lane = services.create_lane(self.tenant, name="ppe", actor=SYSTEM)
        Lane.objects.filter(pk=lane.pk).update(last_live_at=timezone.now())
        assert_error(self.client(Role.DEVELOPER).delete(self.url("ppe")), 409, "lane_in_use")

    def test_a_name_several_tenants_use_needs_the_tenant(self) -> None:
        services.create_lane(self.tenant, name="ppe", actor=SYSTEM)
        services.create_lane(self.other_tenant, name="ppe", actor=SYSTEM)
        client = self.client_for(roles={"acme": Role.VIEWER, "globex": Role.VIEWER})
        assert_error(client.get(self.url("ppe")), 400, "invalid")
        assert client.get(self.url("ppe") + "?tenant=globex").json()["tenant"] == "globex"

    def test_the_quota_shows_lanes_in_use(self) -> None:
        services.create_lane(self.tenant, name="ppe", actor=SYSTEM)
        response = self.client(Role.VIEWER).get("/api/v1/quotas/acme")
        assert response.status_code == 200, response.content
        assert response.json()["usage"]["lanes"] == 1

    def test_lanes_are_in_the_openapi_document(self) -> None:
        paths = self.client(Role.VIEWER).get("/api/v1/openapi.json").json()["paths"]
        assert {"get", "post"} <= set(paths["/api/v1/lanes"])
        assert {"get", "patch", "delete"} <= set(paths["/api/v1/lanes/{name}"])
