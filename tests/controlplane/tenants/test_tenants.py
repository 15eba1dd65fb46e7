"""Tenants: platform admins create, change and delete them; members read theirs;
creation enqueues provisioning, which the local identity provider completes."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.accounts.identity import LocalIdentity
from controlplane.accounts.services import create_service_account, invite_member
from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.errors import Conflict
from controlplane.core.models import AuditEvent
from controlplane.quotas.models import Quota
from controlplane.regions.models import Region
from controlplane.tenants import tasks
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import create_tenant, delete_tenant
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import assert_error, make_cluster, make_tenant

SYSTEM = Actor.system("tests")


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """The tenant jobs enqueued, by task name, instead of sending them to a queue that no
    worker serves in these tests (the task functions are tested directly below)."""
    jobs: dict[str, list[int]] = {"provision_tenant": [], "deprovision_tenant": []}
    for name, ids in jobs.items():
        monkeypatch.setattr(getattr(tasks, name), "delay", ids.append)
    return jobs


def test_admin_creates_a_tenant_with_default_quota_and_provisioning_enqueued(
    admin_client: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    Region.objects.create(name="eu-west")
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            "/api/v1/tenants",
            {"slug": "acme", "name": "Acme Corp", "home_region": "eu-west"},
            format="json",
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["slug"], body["status"], body["home_region"]) == ("acme", "pending", "eu-west")
    tenant = Tenant.objects.get(slug="acme")
    assert Quota.objects.get(tenant=tenant).max_topics == 100
    assert enqueued["provision_tenant"] == [tenant.pk]
    event = AuditEvent.objects.get(action="tenant.create")
    assert (event.actor_name, event.before, event.after["slug"]) == ("operator", None, "acme")


def test_nothing_is_enqueued_when_the_create_fails(
    admin_client: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    make_tenant("acme")
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            "/api/v1/tenants", {"slug": "acme", "name": "Again"}, format="json"
        )
    assert_error(response, 409, "conflict")
    assert enqueued["provision_tenant"] == []


@pytest.mark.parametrize(
    "slug", ["A", "ab", "Acme", "1acme", "acme-", "a" * 40, "ac me", "acme--prod", "a---b"]
)
def test_a_bad_slug_is_a_400(admin_client: Any, slug: str) -> None:
    response = admin_client.post("/api/v1/tenants", {"slug": slug, "name": "x"}, format="json")
    assert "slug" in assert_error(response, 400, "invalid")["details"]
    assert not Tenant.objects.exists()


def test_provisioning_with_the_local_identity_makes_the_tenant_ready(
    db: None, local_identity: LocalIdentity
) -> None:
    tenant = create_tenant(slug="acme", name="Acme", actor=SYSTEM)
    tasks.provision_tenant(tenant.pk)
    tenant.refresh_from_db()
    assert tenant.status == "ready"
    assert tenant.identity_ref  # the IdP's reference to the tenant's group
    assert AuditEvent.objects.filter(action="tenant.provision", object_id=str(tenant.pk)).exists()
    tasks.provision_tenant(tenant.pk)  # a redelivered job changes nothing
    assert Tenant.objects.get(pk=tenant.pk).status == "ready"


def test_a_failed_provisioning_shows_the_reason_and_can_be_retried(
    db: None, local_identity: LocalIdentity, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = create_tenant(slug="acme", name="Acme", actor=SYSTEM)

    def refuse(tenant: Tenant) -> str:
        raise RuntimeError("group quota reached")

    monkeypatch.setattr(local_identity, "provision_tenant", refuse)
    with pytest.raises(RuntimeError):
        tasks.provision_tenant(tenant.pk)
    tenant.refresh_from_db()
    assert tenant.status == "failed"
    assert "group quota reached" in tenant.status_reason
    monkeypatch.undo()
    tasks.provision_tenant(tenant.pk)
    assert Tenant.objects.get(pk=tenant.pk).status == "ready"


def test_members_read_only_their_tenants(db: None, client_for: Any) -> None:
    make_tenant("acme")
    make_tenant("globex")
    client = client_for(roles={"acme": Role.VIEWER})
    assert [t["slug"] for t in client.get("/api/v1/tenants").json()["results"]] == ["acme"]
    assert client.get("/api/v1/tenants/acme").status_code == 200
    assert_error(client.get("/api/v1/tenants/globex"), 404, "not_found")
    assert_error(client.get("/api/v1/tenants/no.such%0A"), 404, "not_found")


def test_only_platform_admins_write_tenants(
    db: None, client_for: Any, anonymous_client: Any
) -> None:
    make_tenant("acme")
    make_tenant("globex")
    client = client_for(roles={"acme": Role.TENANT_ADMIN})
    response = client.post("/api/v1/tenants", {"slug": "new", "name": "n"}, format="json")
    assert_error(response, 403)
    assert_error(client.patch("/api/v1/tenants/acme", {"name": "x"}, format="json"), 403)
    assert_error(client.delete("/api/v1/tenants/acme"), 403)
    assert_error(client.patch("/api/v1/tenants/globex", {"name": "x"}, format="json"), 404)
    assert_error(client.delete("/api/v1/tenants/globex"), 404)
    assert_error(anonymous_client.get("/api/v1/tenants"), 401)


def test_admin_renames_a_tenant_and_the_change_is_audited(db: None, admin_client: Any) -> None:
    make_tenant("acme")
    response = admin_client.patch("/api/v1/tenants/acme", {"name": "Acme Inc"}, format="json")
    assert response.json()["name"] == "Acme Inc"
    event = AuditEvent.objects.get(action="tenant.update")
    assert (event.before["name"], event.after["name"]) == ("Acme", "Acme Inc")


def test_a_tenant_with_topics_cannot_be_deleted(db: None, admin_client: Any) -> None:
    make_cluster("local")
    tenant = make_tenant("acme")
    create_topic(tenant, name="t", partitions=1, actor=SYSTEM)
    error = assert_error(admin_client.delete("/api/v1/tenants/acme"), 409, "conflict")
    assert error["details"]["topics"] == 1
    assert Tenant.objects.get(slug="acme").status == "ready"


def test_deleting_a_tenant_marks_it_then_the_job_removes_it(
    admin_client: Any,
    local_identity: LocalIdentity,
    enqueued: dict[str, list[int]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    tenant = make_tenant("acme")
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.delete("/api/v1/tenants/acme")
    assert response.status_code == 202
    assert response.json()["status"] == "deleting"
    assert enqueued["deprovision_tenant"] == [tenant.pk]
    tasks.deprovision_tenant(tenant.pk)
    assert not Tenant.objects.filter(pk=tenant.pk).exists()
    assert not Quota.objects.filter(tenant_id=tenant.pk).exists()
    actions = set(AuditEvent.objects.filter(tenant_slug="acme").values_list("action", flat=True))
    assert {"tenant.delete", "tenant.deprovision"} <= actions


def test_a_deleting_tenant_takes_no_new_topics(db: None) -> None:
    make_cluster("local")
    tenant = make_tenant("acme")
    delete_tenant(tenant, actor=SYSTEM)
    tenant.refresh_from_db()
    with pytest.raises(Conflict):
        create_topic(tenant, name="late", partitions=1, actor=SYSTEM)


def test_every_tenant_owned_create_locks_the_tenant_row_first(
    db: None, local_identity: LocalIdentity
) -> None:
    """``delete_tenant`` locks the same row, so a create never interleaves with it."""
    make_cluster("local")
    tenant = make_tenant("acme")
    creates = {
        "topic": lambda: create_topic(tenant, name="t", partitions=1, actor=SYSTEM),
        "service account": lambda: create_service_account(tenant, name="ingest", actor=SYSTEM),
        "member": lambda: invite_member(tenant, username="bob", role="viewer", actor=SYSTEM),
    }
    for what, create in creates.items():
        with CaptureQueriesContext(connection) as queries:
            create()
        writes = [i for i, q in enumerate(queries) if q["sql"].startswith(("INSERT", "UPDATE"))]
        locks = [
            i
            for i, q in enumerate(queries)
            if 'FROM "tenants_tenant"' in q["sql"]
            and q["sql"].endswith(("FOR UPDATE", "FOR NO KEY UPDATE"))
        ]
        assert locks, what
        assert locks[0] < writes[0], what


def test_a_deleting_tenant_takes_no_new_topics_over_the_api(db: None, client_for: Any) -> None:
    """Its own credentials died with the deletion (401); a platform admin's create is
    refused (409)."""
    make_cluster("local")
    acme = make_tenant("acme")
    developer = client_for(roles={"acme": "developer"})
    delete_tenant(acme, actor=SYSTEM)
    late = {"name": "late", "partitions": 1, "tenant": "acme"}
    assert_error(developer.post("/api/v1/topics", late, format="json"), 401)
    admin = client_for(platform_admin=True)
    assert_error(admin.post("/api/v1/topics", late, format="json"), 409, "conflict")


def _age(tenant: Tenant, seconds: float) -> None:
    from datetime import timedelta

    from django.utils import timezone

    Tenant.objects.filter(pk=tenant.pk).update(
        updated_at=timezone.now() - timedelta(seconds=seconds)
    )


def test_stalled_tenants_are_enqueued_again_and_then_provisioned(
    db: None, local_identity: LocalIdentity, enqueued: dict[str, list[int]], settings: Any
) -> None:
    settings.RECONCILE_INTERVAL_S = 30
    lost = create_tenant(slug="lost", name="Enqueue lost", actor=SYSTEM)
    stuck = create_tenant(slug="stuck", name="Worker died", actor=SYSTEM)
    Tenant.objects.filter(pk=stuck.pk).update(status="provisioning")
    fresh = create_tenant(slug="fresh", name="Just created", actor=SYSTEM)
    leaving = make_tenant("leaving")
    Tenant.objects.filter(pk=leaving.pk).update(status="deleting")
    for tenant in (lost, stuck, leaving):
        _age(tenant, 60)
    assert tasks.reconcile_tenants() == {"provision": 2, "deprovision": 1}
    assert sorted(enqueued["provision_tenant"]) == sorted([lost.pk, stuck.pk])
    assert enqueued["deprovision_tenant"] == [leaving.pk]
    assert fresh.pk not in enqueued["provision_tenant"]
    for tenant_id in enqueued["provision_tenant"]:
        tasks.provision_tenant.run(tenant_id)  # what the worker does with the job
    assert set(
        Tenant.objects.filter(pk__in=[lost.pk, stuck.pk]).values_list("status", flat=True)
    ) == {"ready"}


def test_a_tenant_provisioning_now_is_not_claimed_twice(
    db: None, local_identity: LocalIdentity, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = create_tenant(slug="busy", name="Busy", actor=SYSTEM)
    Tenant.objects.filter(pk=tenant.pk).update(status="provisioning")
    calls: list[str] = []
    monkeypatch.setattr(local_identity, "provision_tenant", lambda t: calls.append(t.slug) or "x")
    tasks.provision_tenant(tenant.pk)  # another worker holds it: not stale yet
    assert calls == []
    assert Tenant.objects.get(pk=tenant.pk).status == "provisioning"


def test_a_lost_enqueue_does_not_fail_the_committed_request(
    admin_client: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    def broker_down(tenant_id: int) -> None:
        raise ConnectionError("the Celery broker is down")

    monkeypatch.setattr(tasks.provision_tenant, "delay", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            "/api/v1/tenants", {"slug": "acme", "name": "Acme"}, format="json"
        )
    assert response.status_code == 201, response.content
    assert Tenant.objects.get(slug="acme").status == "pending"  # the sweeper's to pick up
