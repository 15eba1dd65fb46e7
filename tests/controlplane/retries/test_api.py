"""/api/v1/retry-policies: the tenant-scoped contract, and what a policy makes and refuses
(no broker: the topics are desired state only here)."""

from __future__ import annotations

import itertools
from typing import Any

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.quotas.models import Quota
from controlplane.retries import services
from controlplane.retries.models import RetryPolicy
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import TenantScopedAPIContract, assert_error, make_cluster

SYSTEM = Actor.system("tests")
_names = itertools.count()


class TestRetryPolicyAPI(TenantScopedAPIContract):
    base_url = "/api/v1/retry-policies"
    write_role = Role.DEVELOPER
    weak_role = Role.VIEWER
    delete_status = 204

    def prepare(self) -> None:
        self.cluster = make_cluster("local")

    def make_object(self, tenant: Tenant) -> str:
        policy = services.create_retry_policy(tenant, group=f"g{next(_names)}", actor=SYSTEM)
        return policy.group

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {"tenant": tenant.slug, "group": "billing", "max_attempts": 5}

    def update_payload(self) -> dict[str, Any]:
        return {"max_attempts": 7, "backoff_initial_ms": 2000}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["group"])

    # -- beyond the contract -----------------------------------------------------------------
    def test_a_policy_makes_its_groups_retry_and_dead_letter_topics(self) -> None:
        response = self.client(Role.DEVELOPER).post(
            self.url(), {"group": "billing", "partitions": 2, "backoff_initial_ms": 5000},
            format="json",
        )  # fmt: skip
        assert response.status_code == 201, response.content
        body = response.json()
        assert (body["group_id"], body["max_attempts"]) == ("acme.billing", 16)
        assert (body["retry_topic"], body["dead_letter_topic"]) == (
            "acme.billing.retry",
            "acme.billing.dlq",
        )
        made = Topic.objects.filter(full_name__in=["acme.billing.retry", "acme.billing.dlq"])
        assert sorted(t.partitions for t in made) == [2, 2]
        assert AuditEvent.objects.get(action="retry_policy.create").tenant_slug == "acme"
        push = services.delay_push(self.cluster)
        assert push.policies_listed
        (declared,) = push.retry_policies
        assert (declared.group_id, declared.backoff_initial_ms) == ("acme.billing", 5000)
        assert declared.dead_letter_topic == "acme.billing.dlq"
        assert dict(push.max_message_bytes) == {
            "acme.billing.dlq": 1_048_576,
            "acme.billing.retry": 1_048_576,
        }

    def test_deleting_a_policy_deletes_its_topics(self) -> None:
        group = self.make_object(self.tenant)
        assert self.client(Role.DEVELOPER).delete(self.url(group)).status_code == 204
        assert not RetryPolicy.objects.filter(group=group).exists()
        statuses = set(
            Topic.objects.filter(name__startswith=group).values_list("status", flat=True)
        )
        assert statuses == {"deleting"}
        assert AuditEvent.objects.filter(action="retry_policy.delete").count() == 1

    def test_bad_policies_are_refused_and_leave_nothing(self) -> None:
        client = self.client(Role.DEVELOPER)
        for body, field in [
            ({"group": "billing", "max_attempts": 0}, "max_attempts"),
            ({"group": "billing", "max_attempts": 101}, "max_attempts"),
            ({"group": "billing", "backoff_initial_ms": 10}, "backoff_initial_ms"),
            ({"group": "billing", "backoff_multiplier": 0.5}, "backoff_multiplier"),
            (
                {"group": "billing", "backoff_initial_ms": 9000, "backoff_max_ms": 2000},
                "backoff_max_ms",
            ),
            ({"group": "-bad name"}, "group"),
        ]:
            error = assert_error(client.post(self.url(), body, format="json"), 400, "invalid")
            assert field in error["details"], (body, error)
        assert not Topic.objects.exists()
        create_topic(self.tenant, name="billing.dlq", partitions=1, actor=SYSTEM)
        assert_error(client.post(self.url(), {"group": "billing"}, format="json"), 409)
        assert not RetryPolicy.objects.exists()
        assert Topic.objects.count() == 1  # the retry topic made before the refusal went too

    def test_a_policy_counts_its_topics_against_the_quota(self) -> None:
        Quota.objects.filter(tenant=self.tenant).update(max_topics=1)
        response = self.client(Role.DEVELOPER).post(self.url(), {"group": "billing"}, format="json")
        assert_error(response, 409, "quota_exceeded")
        assert not Topic.objects.exists()
