"""/api/v1/topic-acls: the tenant-scoped contract, the validation errors, the audit
trail, and what the controller's push carries of a topic's entries."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from controlplane.accounts.models import ServiceAccount
from controlplane.accounts.services import create_service_account, delete_service_account
from controlplane.controller.leaders import metadata_request
from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics.acls import grant_topic_acl, revoke_topic_acl, update_topic_acl
from controlplane.topics.models import Topic, TopicAcl
from controlplane.topics.services import create_topic, delete_topic
from tests.controlplane.api_base import TenantScopedAPIContract, assert_error, make_cluster
from tests.support.controlplane import make_tenant

SYSTEM = Actor.system("tests")
_subjects = itertools.count()


class TestTopicAclAPI(TenantScopedAPIContract):
    base_url = "/api/v1/topic-acls"
    write_role = Role.TENANT_ADMIN
    weak_role = Role.DEVELOPER
    delete_status = 204

    def prepare(self) -> None:
        self.cluster = make_cluster("local")
        self.topics = {}
        for tenant in (self.tenant, self.other_tenant):
            self.topics[tenant.slug] = create_topic(
                tenant, name="orders", partitions=1, actor=SYSTEM
            )
            create_service_account(tenant, name="app", actor=SYSTEM)

    def make_object(self, tenant: Tenant) -> str:
        acl = grant_topic_acl(
            self.topics[tenant.slug],
            principal=f"subject-{next(_subjects)}",
            operations=["consume"],
            actor=SYSTEM,
        )
        return str(acl.pk)

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {
            "topic": f"{tenant.slug}.orders",
            "principal": f"{tenant.slug}--app",
            "operations": ["consume"],
        }

    def update_payload(self) -> dict[str, Any]:
        return {"operations": ["produce", "consume"]}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["id"])

    def post(self, **changes: Any) -> Any:
        body = {**self.create_payload(self.tenant), **changes}
        return self.client(Role.TENANT_ADMIN).post(self.url(), body, format="json")

    # -- beyond the contract -----------------------------------------------------------------
    def test_a_grant_shows_the_topic_and_its_operations_in_canonical_order(self) -> None:
        response = self.post(operations=["admin", "consume", "produce"])
        assert response.status_code == 201, response.content
        body = response.json()
        assert (body["tenant"], body["topic"], body["principal"]) == (
            "acme",
            "acme.orders",
            "acme--app",
        )
        assert body["operations"] == ["produce", "consume", "admin"]

    def test_an_empty_unknown_or_repeated_operation_list_is_a_400_naming_operations(
        self,
    ) -> None:
        for operations in ([], ["write"], ["consume", "consume"], "consume"):
            error = assert_error(self.post(operations=operations), 400, "invalid")
            assert "operations" in error["details"], (operations, error)
        lookup = self.make_object(self.tenant)
        patch = self.client(Role.TENANT_ADMIN).patch(
            self.url(lookup), {"operations": []}, format="json"
        )
        assert "operations" in assert_error(patch, 400, "invalid")["details"]
        assert TopicAcl.objects.get(pk=lookup).operations == ["consume"]

    def test_another_tenants_service_account_is_a_400_that_tells_nothing(self) -> None:
        """``globex--app`` exists, ``globex--nope`` does not: the same answer."""
        existing = self.post(principal="globex--app")
        missing = self.post(principal="globex--nope")
        error = assert_error(existing, 400, "invalid")
        assert "principal" in error["details"]
        assert existing.content.decode().replace("app", "?") == missing.content.decode().replace(
            "nope", "?"
        )
        unknown_here = assert_error(self.post(principal="acme--nope"), 400, "invalid")
        assert "principal" in unknown_here["details"]
        assert not TopicAcl.objects.exists()

    def test_a_principal_with_spaces_is_a_400(self) -> None:
        for principal in ("has space", "line\nbreak", ""):
            error = assert_error(self.post(principal=principal), 400, "invalid")
            assert "principal" in error["details"], principal

    def test_a_user_subject_is_taken_as_given(self) -> None:
        subject = "4c2d1f3e-5b6a-4d7c-8e9f-0a1b2c3d4e5f"
        response = self.post(principal=subject, operations=["produce"])
        assert response.status_code == 201, response.content
        assert response.json()["principal"] == subject

    def test_a_second_entry_for_one_principal_is_a_409(self) -> None:
        assert self.post().status_code == 201
        assert_error(self.post(operations=["produce"]), 409, "conflict")
        assert list(TopicAcl.objects.values_list("operations", flat=True)) == [["consume"]]

    def test_an_unknown_topic_is_a_404_and_a_deleting_one_a_409(self) -> None:
        assert_error(self.post(topic="acme.nothing"), 404, "not_found")
        assert_error(self.post(topic="globex.orders", tenant="acme"), 404, "not_found")
        delete_topic(self.topics["acme"], actor=SYSTEM)
        assert_error(self.post(), 409, "conflict")

    def test_the_list_filters_by_topic_and_principal(self) -> None:
        other_topic = create_topic(self.tenant, name="payments", partitions=1, actor=SYSTEM)
        grant_topic_acl(other_topic, principal="acme--app", operations=["produce"], actor=SYSTEM)
        mine = self.make_object(self.tenant)
        client = self.client(Role.VIEWER)
        listed = client.get(self.url(), {"topic": "acme.orders"}).json()["results"]
        assert [str(row["id"]) for row in listed] == [mine]
        by_principal = client.get(self.url(), {"principal": "acme--app"}).json()["results"]
        assert [row["topic"] for row in by_principal] == ["acme.payments"]

    def test_grant_update_and_revoke_are_audited(self) -> None:
        created = self.post().json()
        url = self.url(str(created["id"]))
        self.client(Role.TENANT_ADMIN).patch(url, {"operations": ["produce"]}, format="json")
        assert self.client(Role.TENANT_ADMIN).delete(url).status_code == 204
        events = AuditEvent.objects.filter(object_id=str(created["id"]), tenant_slug="acme")
        trail = [(e.action, e.before or {}, e.after or {}) for e in events.order_by("id")]
        assert [action for action, _, _ in trail] == [
            "topic_acl.grant",
            "topic_acl.update",
            "topic_acl.revoke",
        ]
        assert trail[0][2]["operations"] == ["consume"]
        assert (trail[1][1]["operations"], trail[1][2]["operations"]) == (["consume"], ["produce"])
        assert trail[2][1]["principal"] == "acme--app"


# -- the push -------------------------------------------------------------------------------
def pushed_acls(cluster: Cluster) -> dict[str, list[tuple[str, list[str]]]]:
    request = metadata_request(cluster, list(cluster.brokers.all()), controller_id="c", epoch=1)
    return {
        topic.name: [(entry.principal, list(entry.operations)) for entry in topic.acls]
        for topic in request.topics
    }


@pytest.fixture
def acme_topics(db: None, local_identity: Any) -> tuple[Cluster, Topic, Topic]:
    cluster = make_cluster("local")
    acme = make_tenant("acme")
    for name in ("reader", "writer"):
        create_service_account(acme, name=name, actor=SYSTEM)
    orders = create_topic(acme, name="orders", partitions=2, actor=SYSTEM)
    open_topic = create_topic(acme, name="open", partitions=1, actor=SYSTEM)
    return cluster, orders, open_topic


def test_the_push_carries_each_topics_entries_by_principal(
    acme_topics: tuple[Cluster, Topic, Topic],
) -> None:
    cluster, orders, _ = acme_topics
    grant_topic_acl(orders, principal="acme--writer", operations=["consume", "produce"],
                    actor=SYSTEM)  # fmt: skip
    grant_topic_acl(orders, principal="acme--reader", operations=["consume"], actor=SYSTEM)

    acls = pushed_acls(cluster)

    assert acls["acme.orders"] == [
        ("acme--reader", ["consume"]),
        ("acme--writer", ["produce", "consume"]),
    ]
    assert acls["acme.open"] == []  # no entry: the brokers apply the roles alone


def test_a_changed_or_revoked_entry_changes_the_push_and_an_unchanged_one_does_not(
    acme_topics: tuple[Cluster, Topic, Topic],
) -> None:
    cluster, orders, _ = acme_topics
    acl = grant_topic_acl(orders, principal="acme--reader", operations=["consume"], actor=SYSTEM)
    first = metadata_request(cluster, [], controller_id="c", epoch=1)
    again = metadata_request(cluster, [], controller_id="c", epoch=1)
    assert first.SerializeToString(deterministic=True) == again.SerializeToString(
        deterministic=True
    )
    update_topic_acl(acl, operations=["admin", "consume"], actor=SYSTEM)
    assert pushed_acls(cluster)["acme.orders"] == [("acme--reader", ["consume", "admin"])]
    revoke_topic_acl(TopicAcl.objects.get(pk=acl.pk), actor=SYSTEM)
    assert pushed_acls(cluster)["acme.orders"] == []


def test_a_deleting_topics_entries_are_not_pushed(
    acme_topics: tuple[Cluster, Topic, Topic],
) -> None:
    cluster, orders, _ = acme_topics
    grant_topic_acl(orders, principal="acme--reader", operations=["consume"], actor=SYSTEM)
    delete_topic(orders, actor=SYSTEM)
    assert "acme.orders" not in pushed_acls(cluster)


def test_deleting_a_service_account_leaves_the_topic_narrowed(
    acme_topics: tuple[Cluster, Topic, Topic],
) -> None:
    """Revoking its entries could leave the topic with none: open to every role."""
    cluster, orders, _ = acme_topics
    grant_topic_acl(orders, principal="acme--reader", operations=["consume"], actor=SYSTEM)
    delete_service_account(ServiceAccount.objects.get(client_id="acme--reader"), actor=SYSTEM)
    assert pushed_acls(cluster)["acme.orders"] == [("acme--reader", ["consume"])]
