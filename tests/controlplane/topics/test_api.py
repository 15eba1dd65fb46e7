"""/api/v1/topics: the tenant-scoped contract, validation errors, growth, and what a
topic shows of its placement."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import TenantScopedAPIContract, assert_error, make_cluster

SYSTEM = Actor.system("tests")
_names = itertools.count()


class TestTopicAPI(TenantScopedAPIContract):
    base_url = "/api/v1/topics"
    write_role = Role.DEVELOPER
    weak_role = Role.VIEWER
    delete_status = 202

    def prepare(self) -> None:
        self.cluster = make_cluster("local")

    def make_object(self, tenant: Tenant) -> str:
        return create_topic(tenant, name=f"t{next(_names)}", partitions=2, actor=SYSTEM).full_name  # type: ignore[no-any-return]

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {"tenant": tenant.slug, "name": "orders.v1", "partitions": 3}

    def update_payload(self) -> dict[str, Any]:
        return {"partitions": 5, "retention_ms": 3_600_000}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["full_name"])

    # -- beyond the contract -----------------------------------------------------------------
    def test_created_topic_shows_its_placement_and_generations(self) -> None:
        response = self.client(Role.DEVELOPER).post(
            self.url(), {"name": "orders", "partitions": 3}, format="json"
        )
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["full_name"] == "acme.orders"  # tenant defaulted: the caller has one
        assert (body["status"], body["generation"], body["observed_generation"]) == (
            "pending",
            1,
            0,
        )
        assert (body["region"], body["cluster"]) == ("local", "c1")
        assert [a["partition"] for a in body["assignments"]] == [0, 1, 2]
        assert len({a["broker_id"] for a in body["assignments"]}) == 3
        assert body["retention_bytes"] == 2**30  # the default from TOPIC_LIMITS

    def test_growing_partitions_bumps_generation_and_places_the_new_ones(self) -> None:
        lookup = self.make_object(self.tenant)
        response = self.client(Role.DEVELOPER).patch(
            self.url(lookup), {"partitions": 4}, format="json"
        )
        body = response.json()
        assert (body["partitions"], body["generation"], body["status"]) == (4, 2, "pending")
        assert [a["partition"] for a in body["assignments"]] == [0, 1, 2, 3]

    def test_a_topic_is_replicated_three_times_by_default_with_min_isr_two(self) -> None:
        response = self.client(Role.DEVELOPER).post(
            self.url(), {"name": "replicated", "partitions": 3}, format="json"
        )
        body = response.json()
        assert (
            body["replication_factor"],
            body["min_insync_replicas"],
            body["unclean_leader_election"],
        ) == (3, 2, False)
        for assignment in body["assignments"]:
            assert sorted(assignment["replicas"]) == [1, 2, 3]
            assert assignment["isr"] == assignment["replicas"]
            assert assignment["broker_id"] == assignment["replicas"][0]
            assert assignment["leader_id"] is None  # the controller elects
            assert assignment["target_replicas"] is None
        assert sorted(a["broker_id"] for a in body["assignments"]) == [1, 2, 3]

    def test_replication_settings_are_chosen_at_creation_and_min_isr_unclean_changed(
        self,
    ) -> None:
        created = self.client(Role.DEVELOPER).post(
            self.url(),
            {
                "name": "pairs",
                "partitions": 1,
                "replication_factor": 2,
                "min_insync_replicas": 1,
                "unclean_leader_election": True,
            },
            format="json",
        )
        body = created.json()
        assert (body["replication_factor"], body["min_insync_replicas"]) == (2, 1)
        assert body["unclean_leader_election"] is True
        assert len(body["assignments"][0]["replicas"]) == 2
        url = self.url(body["full_name"])
        changed = self.client(Role.DEVELOPER).patch(
            url, {"min_insync_replicas": 2, "unclean_leader_election": False}, format="json"
        )
        assert changed.status_code == 200, changed.content
        assert (changed.json()["min_insync_replicas"], changed.json()["generation"]) == (2, 2)
        assert changed.json()["unclean_leader_election"] is False
        refused = self.client(Role.DEVELOPER).patch(url, {"replication_factor": 3}, format="json")
        assert_error(refused, 409)
        too_high = self.client(Role.DEVELOPER).patch(url, {"min_insync_replicas": 3}, format="json")
        assert "min_insync_replicas" in assert_error(too_high, 400, "invalid")["details"]

    def test_the_default_replication_factor_is_capped_by_the_cluster(self) -> None:
        self.cluster.brokers.exclude(broker_id=1).update(phase="stopped")
        response = self.client(Role.DEVELOPER).post(
            self.url(), {"name": "lonely", "partitions": 2}, format="json"
        )
        body = response.json()
        assert (body["replication_factor"], body["min_insync_replicas"]) == (1, 1)
        assert [a["replicas"] for a in body["assignments"]] == [[1], [1]]

    def test_platform_admins_reassign_partitions_and_see_the_move(self) -> None:
        lookup = create_topic(
            self.tenant, name="moving", partitions=1, replication_factor=2, actor=SYSTEM
        ).full_name
        url = self.url(lookup) + "/reassign"
        body = {"partitions": [{"partition": 0, "replicas": [3, 1]}]}
        refused = self.client(Role.TENANT_ADMIN).post(url, body, format="json")
        assert refused.status_code == 403  # tenant admins do not move replicas
        response = self.client_for(platform_admin=True, username="operator").post(
            url, body, format="json"
        )
        assert response.status_code == 202, response.content
        (assignment,) = response.json()["assignments"]
        assert assignment["target_replicas"] == [3, 1]
        assert assignment["replicas"][:2] == [3, 1]
        assert len(assignment["replicas"]) == 3
        again = {"partitions": [{"partition": 0, "replicas": [2, 1]}]}
        operator = self.client_for(platform_admin=True, username="operator")
        assert_error(operator.post(url, again, format="json"), 409)  # in progress

    def test_shrinking_partitions_is_a_400_that_says_why(self) -> None:
        lookup = self.make_object(self.tenant)
        response = self.client(Role.DEVELOPER).patch(
            self.url(lookup), {"partitions": 1}, format="json"
        )
        error = assert_error(response, 400, "invalid")
        assert "only grow" in error["message"]
        assert "partitions" in error["details"]
        assert Topic.objects.get(full_name=lookup).partitions == 2

    def test_an_update_that_changes_nothing_keeps_the_generation(self) -> None:
        lookup = self.make_object(self.tenant)
        response = self.client(Role.DEVELOPER).patch(
            self.url(lookup), {"partitions": 2}, format="json"
        )
        assert response.json()["generation"] == 1

    @pytest.mark.parametrize(
        ("payload", "field"),
        [
            ({"name": "lane~ppe", "partitions": 1}, "name"),
            ({"name": "__consumer_offsets", "partitions": 1}, "name"),
            ({"name": "has space", "partitions": 1}, "name"),
            ({"name": "-leading", "partitions": 1}, "name"),
            ({"name": "ok", "partitions": 0}, "partitions"),
            ({"name": "ok", "partitions": 100_000}, "partitions"),
            ({"name": "ok", "partitions": "many"}, "partitions"),
            ({"name": "ok", "partitions": 1, "retention_ms": 1}, "retention_ms"),
            ({"name": "ok", "partitions": 1, "retention_bytes": 10**15}, "retention_bytes"),
            ({"name": "ok", "partitions": 1, "max_message_bytes": 10}, "max_message_bytes"),
            ({"name": "ok", "partitions": 1, "durability": "sometimes"}, "durability"),
            ({"partitions": 1}, "name"),
            ({"name": "ok", "partitions": 1, "replication_factor": 4}, "replication_factor"),
            ({"name": "ok", "partitions": 1, "replication_factor": 0}, "replication_factor"),
            ({"name": "ok", "partitions": 1, "min_insync_replicas": 4}, "min_insync_replicas"),
            (
                {"name": "ok", "partitions": 1, "replication_factor": 2, "min_insync_replicas": 3},
                "min_insync_replicas",
            ),
            ({"name": "ok", "partitions": 1, "min_insync_replicas": 0}, "min_insync_replicas"),
        ],
    )
    def test_invalid_input_is_a_400_naming_the_field(
        self, payload: dict[str, Any], field: str
    ) -> None:
        response = self.client(Role.DEVELOPER).post(self.url(), payload, format="json")
        error = assert_error(response, 400, "invalid")
        assert field in error["details"], error
        assert not Topic.objects.exists()

    def test_a_name_in_use_is_a_409(self) -> None:
        client = self.client(Role.DEVELOPER)
        assert (
            client.post(self.url(), {"name": "a", "partitions": 1}, format="json").status_code
            == 201
        )
        response = client.post(self.url(), {"name": "a", "partitions": 1}, format="json")
        assert_error(response, 409, "conflict")
        assert Topic.objects.filter(tenant=self.tenant).count() == 1

    def test_an_unknown_region_is_a_400(self) -> None:
        response = self.client(Role.DEVELOPER).post(
            self.url(), {"name": "a", "partitions": 1, "region": "mars"}, format="json"
        )
        assert "region" in assert_error(response, 400, "invalid")["details"]

    def test_a_caller_of_several_tenants_must_name_one(self) -> None:
        client = self.client_for(roles={"acme": "developer", "globex": "developer"})
        response = client.post(self.url(), {"name": "a", "partitions": 1}, format="json")
        assert_error(response, 404)
        response = client.post(
            self.url(), {"tenant": "globex", "name": "a", "partitions": 1}, format="json"
        )
        assert response.json()["full_name"] == "globex.a"

    def test_filters_and_ordering(self) -> None:
        for name in ("billing", "orders", "orders-dlq"):
            create_topic(self.tenant, name=name, partitions=1, actor=SYSTEM)
        client = self.client(Role.VIEWER)

        def names(**query: Any) -> list[str]:
            return [r["name"] for r in client.get(self.url(), query).json()["results"]]

        assert names(name="order") == ["orders", "orders-dlq"]
        assert names(ordering="-name") == ["orders-dlq", "orders", "billing"]
        assert names(status="deleting") == []
        assert names(region="local", limit=1) == ["billing"]

    def test_list_is_paginated_by_limit_and_offset(self) -> None:
        for i in range(3):
            create_topic(self.tenant, name=f"p{i}", partitions=1, actor=SYSTEM)
        body = self.client(Role.VIEWER).get(self.url(), {"limit": 2, "offset": 1}).json()
        assert body["count"] == 3
        assert [r["name"] for r in body["results"]] == ["p1", "p2"]

    def test_changes_are_audited_with_before_and_after(self) -> None:
        client = self.client_for(roles={"acme": "developer"}, username="alice")
        client.post(self.url(), {"name": "audited", "partitions": 1}, format="json")
        client.patch(self.url("acme.audited"), {"partitions": 2}, format="json")
        client.delete(self.url("acme.audited"))
        events = list(AuditEvent.objects.filter(object_repr="acme.audited").order_by("id"))
        assert [e.action for e in events] == ["topic.create", "topic.update", "topic.delete"]
        assert {e.actor_name for e in events} == {"alice"}
        assert {e.tenant_slug for e in events} == {"acme"}
        create, update, delete = events
        assert create.before is None
        assert create.after["partitions"] == 1
        assert (update.before["partitions"], update.after["partitions"]) == (1, 2)
        assert (delete.before["status"], delete.after["status"]) == ("pending", "deleting")

    def test_deleting_twice_is_accepted_and_changes_nothing(self) -> None:
        lookup = self.make_object(self.tenant)
        client = self.client(Role.DEVELOPER)
        first = client.delete(self.url(lookup)).json()
        second = client.delete(self.url(lookup)).json()
        assert first["generation"] == second["generation"] == 2
        response = client.patch(self.url(lookup), {"partitions": 9}, format="json")
        assert_error(response, 409, "conflict")
