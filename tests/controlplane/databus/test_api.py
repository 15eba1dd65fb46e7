"""/api/v1/databus-configs and /api/v1/databus-agents: the tenant-scoped contract, the
document's refusals named by field, versions and ETags, the long-poll watch, and the
agents' heartbeats (with a service account's token, as agents run)."""

from __future__ import annotations

import itertools
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.accounts import services as accounts
from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.databus import services, tasks
from controlplane.databus.models import DatabusAgent, DatabusConfig
from controlplane.lanes.services import create_lane
from controlplane.tenants.models import Tenant
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import TenantScopedAPIContract, assert_error, make_cluster
from tests.support.controlplane import make_tenant

SYSTEM = Actor.system("tests")
_names = itertools.count()


def document(tenant: Tenant, topic: str = "orders", **settings: Any) -> dict[str, Any]:
    return {"streams": {"clicks": {"topic": f"{tenant.slug}.{topic}", **settings}}}


def stats(**overrides: Any) -> dict[str, Any]:
    counters: dict[str, Any] = {
        "records_in": 10,
        "records_out": 8,
        "bytes_in": 1000,
        "bytes_out": 800,
        "spool_records": 2,
        "spool_bytes": 200,
        "spool_age_s": 0.5,
        "dropped": 0,
        "rejected": 0,
    }
    return {"clicks": {**counters, **overrides}}


def heartbeat(agent_id: str, config: str = "web", version: int = 1, **extra: Any) -> dict:
    return {
        "agent_id": agent_id,
        "config": config,
        "version": version,
        "hostname": "web-1",
        "pid": 4242,
        "started_at": "2026-11-27T10:00:00Z",
        "stats": stats(),
        **extra,
    }


class TestDatabusConfigAPI(TenantScopedAPIContract):
    base_url = "/api/v1/databus-configs"
    write_role = Role.DEVELOPER
    weak_role = Role.VIEWER
    delete_status = 204  # deleting is immediate

    def prepare(self) -> None:
        self.cluster = make_cluster("local")
        for tenant in (self.tenant, self.other_tenant):
            create_topic(tenant, name="orders", partitions=3, actor=SYSTEM)

    def make_object(self, tenant: Tenant) -> str:
        config = services.create_databus_config(
            tenant, name=f"config-{next(_names)}", document=document(tenant), actor=SYSTEM
        )
        return config.name

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {"tenant": tenant.slug, "name": "web", "document": document(tenant)}

    def update_payload(self) -> dict[str, Any]:
        return {"description": "the web tier's writes"}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["name"])

    # -- beyond the contract -----------------------------------------------------------------
    def test_a_created_config_is_normalised_resolved_versioned_and_audited(self) -> None:
        client = self.client(Role.DEVELOPER)
        body = {"name": "web", "description": "web", "document": document(self.tenant)}
        response = client.post(self.url(), body, format="json")
        assert response.status_code == 201, response.content
        created = response.json()
        assert response["ETag"] == '"1"'
        assert created["version"] == 1
        assert created["tenant"] == "acme"
        clicks = created["document"]["streams"]["clicks"]
        assert clicks["topic"] == "acme.orders"
        assert (clicks["linger_ms"], clicks["compression"], clicks["lane"]) == (50, "lz4", None)
        assert created["resolved"] == {
            "clicks": {"topic": "acme.orders", "max_record_bytes": 1_048_576, "partitions": 3}
        }
        event = AuditEvent.objects.get(action="databus_config.create")
        assert (event.tenant_slug, event.after["name"], event.after["version"]) == (
            "acme",
            "web",
            1,
        )

    def test_retrieve_answers_the_version_as_etag(self) -> None:
        name = self.make_object(self.tenant)
        response = self.client(Role.VIEWER).get(self.url(name))
        assert response.status_code == 200
        assert response["ETag"] == '"1"'
        assert set(response.json()) == {
            "tenant", "name", "description", "version", "document", "resolved", "created_by",
            "created_at", "updated_at",
        }  # fmt: skip

    def test_a_document_change_moves_the_version_and_a_description_change_does_not(
        self,
    ) -> None:
        name = self.make_object(self.tenant)
        client = self.client(Role.DEVELOPER)
        changed = document(self.tenant, linger_ms=75)
        response = client.patch(self.url(name), {"document": changed}, format="json")
        assert response.status_code == 200, response.content
        assert (response.json()["version"], response["ETag"]) == (2, '"2"')
        # The same document again, and the description alone: the version stays.
        assert (
            client.patch(self.url(name), {"document": changed}, format="json").json()["version"]
            == 2
        )
        response = client.patch(self.url(name), {"description": "new"}, format="json")
        assert (response.json()["version"], response.json()["description"]) == (2, "new")
        # PUT replaces both; an absent description becomes empty.
        response = client.put(self.url(name), {"document": document(self.tenant)}, format="json")
        assert response.status_code == 200, response.content
        assert (response.json()["version"], response.json()["description"]) == (3, "")
        assert response.json()["document"]["streams"]["clicks"]["linger_ms"] == 50
        assert AuditEvent.objects.filter(action="databus_config.update").count() == 3

    def test_a_schema_error_is_400_naming_the_field_under_document(self) -> None:
        client = self.client(Role.DEVELOPER)
        body = {"name": "web", "document": document(self.tenant, linger_ms=70_000)}
        error = assert_error(client.post(self.url(), body, format="json"), 400, "invalid")
        assert error["details"] == {
            "document": {"streams.clicks.linger_ms": ["must be an integer from 0 to 60000"]}
        }
        assert "streams.clicks.linger_ms" in error["message"]
        body = {
            "name": "web",
            "document": {"streams": {"clicks": {"topic": "acme.orders", "x": 1}}},
        }
        error = assert_error(client.post(self.url(), body, format="json"), 400, "invalid")
        assert error["details"] == {"document": {"streams.clicks.x": ["unknown field"]}}
        body = {"name": "web", "document": ["not", "an", "object"]}
        error = assert_error(client.post(self.url(), body, format="json"), 400, "invalid")
        assert list(error["details"]["document"]) == ["(document)"]
        assert not DatabusConfig.objects.exists()

    def test_an_update_refused_keeps_the_config(self) -> None:
        name = self.make_object(self.tenant)
        bad = {"document": document(self.tenant, compression="brotli")}
        error = assert_error(
            self.client(Role.DEVELOPER).patch(self.url(name), bad, format="json"), 400
        )
        assert list(error["details"]["document"]) == ["streams.clicks.compression"]
        config = DatabusConfig.objects.get(name=name)
        assert (config.version, config.document["streams"]["clicks"]["compression"]) == (1, "lz4")

    def test_another_tenants_topic_is_refused_like_a_missing_one(self) -> None:
        client = self.client(Role.DEVELOPER)
        theirs = {"name": "web", "document": {"streams": {"s": {"topic": "globex.orders"}}}}
        missing = {"name": "web", "document": {"streams": {"s": {"topic": "acme.nope"}}}}
        theirs_error = assert_error(client.post(self.url(), theirs, format="json"), 400, "invalid")
        missing_error = assert_error(client.post(self.url(), missing, format="json"), 400)
        assert theirs_error["details"] == {
            "document": {"streams.s.topic": ["no topic 'globex.orders' in tenant 'acme'"]}
        }
        assert missing_error["details"] == {
            "document": {"streams.s.topic": ["no topic 'acme.nope' in tenant 'acme'"]}
        }
        assert not DatabusConfig.objects.exists()

    def test_a_lane_must_be_declared_and_cover_the_topic(self) -> None:
        create_topic(self.tenant, name="payments", partitions=1, actor=SYSTEM)
        create_lane(self.tenant, name="ppe", all_topics=False, topics=["payments"], actor=SYSTEM)
        create_lane(self.tenant, name="qa-team", actor=SYSTEM)  # every topic
        client = self.client(Role.DEVELOPER)
        for lane, message in [
            ("nope", "no lane 'nope' in tenant 'acme'"),
            ("ppe", "lane 'ppe' does not cover 'acme.orders'"),
        ]:
            body = {"name": "web", "document": document(self.tenant, lane=lane)}
            error = assert_error(client.post(self.url(), body, format="json"), 400, "invalid")
            assert error["details"] == {"document": {"streams.clicks.lane": [message]}}
        body = {"name": "web", "document": document(self.tenant, lane="qa-team")}
        assert client.post(self.url(), body, format="json").status_code == 201

    def test_bad_names_and_a_name_in_use(self) -> None:
        client = self.client(Role.DEVELOPER)
        for bad in ["", "ab", "Web", "a--b", "-ab", "x" * 33, "a.b"]:
            body = {"name": bad, "document": document(self.tenant)}
            error = assert_error(client.post(self.url(), body, format="json"), 400, "invalid")
            assert "name" in error["details"], (bad, error)
        name = self.make_object(self.tenant)
        body = {"name": name, "document": document(self.tenant)}
        assert_error(client.post(self.url(), body, format="json"), 409, "conflict")

    def test_an_oversized_or_too_deep_body_is_refused(self) -> None:
        client = self.client(Role.DEVELOPER)
        deep: Any = {}
        for _ in range(100):
            deep = {"x": deep}
        body = {"name": "web", "document": deep}
        assert_error(client.post(self.url(), body, format="json"), 400, "malformed")
        huge = {"name": "web", "description": "x" * 3_000_000, "document": {}}
        assert_error(client.post(self.url(), huge, format="json"), 413, "too_large")

    def test_watch_answers_at_once_when_the_version_differs(self) -> None:
        name = self.make_object(self.tenant)
        client = self.client(Role.VIEWER)
        response = client.get(self.url(name) + "/watch")
        assert response.status_code == 200
        assert (response["ETag"], response.json()["version"]) == ('"1"', 1)
        response = client.get(self.url(name) + "/watch", HTTP_IF_NONE_MATCH='"0"')
        assert response.status_code == 200
        assert response.json() == client.get(self.url(name)).json()

    def test_watch_answers_304_after_the_wait(self) -> None:
        name = self.make_object(self.tenant)
        response = self.client(Role.VIEWER).get(
            self.url(name) + "/watch?wait=0.2", HTTP_IF_NONE_MATCH='"1"'
        )
        assert response.status_code == 304
        assert response["ETag"] == '"1"'
        assert response.content == b""

    def test_watch_refuses_a_wait_out_of_range_and_answers_404_for_a_missing_config(
        self,
    ) -> None:
        name = self.make_object(self.tenant)
        client = self.client(Role.VIEWER)
        for wait in ["31", "-1", "soon", "nan"]:
            error = assert_error(client.get(self.url(name) + f"/watch?wait={wait}"), 400)
            assert "wait" in error["details"]
        assert_error(client.get(self.url("nope") + "/watch"), 404, "not_found")

    def test_configs_are_in_the_openapi_document(self) -> None:
        paths = self.client(Role.VIEWER).get("/api/v1/openapi.json").json()["paths"]
        assert {"get", "post"} <= set(paths["/api/v1/databus-configs"])
        assert {"get", "put", "patch", "delete"} <= set(paths["/api/v1/databus-configs/{name}"])
        assert "get" in paths["/api/v1/databus-configs/{name}/watch"]
        assert "post" in paths["/api/v1/databus-agents/heartbeat"]
        assert "get" in paths["/api/v1/databus-agents/{agent_id}"]


@pytest.mark.django_db(transaction=True)
def test_a_waiting_watch_answers_when_the_version_changes(
    client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change committed by another connection while the watch waits ends the wait
    with the new version (well before the 30 s the watch was asked to wait)."""
    make_cluster("local")
    acme = make_tenant("acme")
    create_topic(acme, name="orders", partitions=3, actor=SYSTEM)
    config = services.create_databus_config(acme, name="web", document=document(acme), actor=SYSTEM)
    watching = threading.Event()

    def change() -> None:
        try:
            watching.wait(10)
            services.update_databus_config(
                config, document=document(acme, linger_ms=5), actor=SYSTEM
            )
        finally:
            connection.close()

    changer = threading.Thread(target=change)
    changer.start()
    client = client_for(roles={"acme": Role.VIEWER})
    original = services.current_version

    def watched(config_id: int) -> int | None:
        watching.set()  # the watch is waiting: let the change come
        return original(config_id)

    monkeypatch.setattr(services, "current_version", watched)
    try:
        response = client.get("/api/v1/databus-configs/web/watch?wait=30", HTTP_IF_NONE_MATCH='"1"')
    finally:
        watching.set()
        changer.join()
    assert response.status_code == 200, response.content
    assert (response["ETag"], response.json()["version"]) == ('"2"', 2)
    assert response.json()["document"]["streams"]["clicks"]["linger_ms"] == 5


@pytest.mark.django_db(transaction=True)
def test_a_watch_ends_with_404_when_the_config_is_deleted(
    client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_cluster("local")
    acme = make_tenant("acme")
    create_topic(acme, name="orders", partitions=3, actor=SYSTEM)
    config = services.create_databus_config(acme, name="web", document=document(acme), actor=SYSTEM)
    original = services.current_version

    def deleted_meanwhile(config_id: int) -> int | None:
        DatabusConfig.objects.filter(pk=config.pk).delete()
        return original(config_id)

    client = client_for(roles={"acme": Role.VIEWER})
    monkeypatch.setattr(services, "current_version", deleted_meanwhile)
    response = client.get("/api/v1/databus-configs/web/watch?wait=30", HTTP_IF_NONE_MATCH='"1"')
    assert_error(response, 404, "not_found")


# -- agents ------------------------------------------------------------------------------------
@pytest.fixture
def acme(db: None) -> Tenant:
    make_cluster("local")
    tenant = make_tenant("acme")
    make_tenant("globex")
    create_topic(tenant, name="orders", partitions=3, actor=SYSTEM)
    services.create_databus_config(tenant, name="web", document=document(tenant), actor=SYSTEM)
    return tenant


def service_account_client(tenant: Tenant, role: str = Role.VIEWER) -> tuple[APIClient, Any]:
    """A client with a token of a new service account of ``tenant`` (client credentials
    at the local issuer, as an agent gets one)."""
    account, secret = accounts.create_service_account(
        tenant, name=f"agent-{next(_names)}", role=role, actor=SYSTEM
    )
    body = {"grant_type": "client_credentials", "client_id": account.client_id}
    body["client_secret"] = secret
    token = APIClient().post("/api/v1/auth/token", body, format="json").json()["access_token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client, account


def test_an_agent_with_a_service_account_reads_watches_and_reports(
    acme: Tenant, local_identity: Any
) -> None:
    client, account = service_account_client(acme)
    config = client.get("/api/v1/databus-configs/web")
    assert config.status_code == 200, config.content
    assert config["ETag"] == '"1"'
    watch = client.get("/api/v1/databus-configs/web/watch?wait=0", HTTP_IF_NONE_MATCH='"1"')
    assert watch.status_code == 304
    agent_id = str(uuid.uuid4())
    response = client.post("/api/v1/databus-agents/heartbeat", heartbeat(agent_id), format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {"agent_id": agent_id, "latest_version": 1}
    agent = DatabusAgent.objects.get(agent_id=agent_id)
    assert agent.principal == str(account.uid)  # its immutable id, not its name
    # A viewer account may read but not change a configuration.
    body = {"description": "x"}
    assert_error(client.patch("/api/v1/databus-configs/web", body, format="json"), 403)


def test_heartbeats_upsert_and_the_agents_are_listed(acme: Tenant, client_for: Any) -> None:
    agent_client = client_for(roles={"acme": Role.VIEWER})
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    url = "/api/v1/databus-agents/heartbeat"
    assert agent_client.post(url, heartbeat(first), format="json").status_code == 200
    assert agent_client.post(url, heartbeat(second, version=0), format="json").status_code == 200
    gone = agent_client.post(url, heartbeat(str(uuid.uuid4()), config="old"), format="json")
    assert gone.json()["latest_version"] is None
    services.update_databus_config(
        DatabusConfig.objects.get(name="web"), document=document(acme, linger_ms=1), actor=SYSTEM
    )
    answer = agent_client.post(url, heartbeat(first, version=2, hostname="web-9"), format="json")
    assert answer.json() == {"agent_id": first, "latest_version": 2}
    assert DatabusAgent.objects.filter(tenant=acme).count() == 3
    assert not AuditEvent.objects.filter(action__startswith="databus_agent").exists()

    reader = client_for(roles={"acme": Role.VIEWER})
    listed = reader.get("/api/v1/databus-agents", {"config": "web"}).json()["results"]
    rows = {row["agent_id"]: row for row in listed}
    assert set(rows) == {first, second}
    assert rows[first]["hostname"] == "web-9"
    assert (rows[first]["version"], rows[first]["latest_version"]) == (2, 2)
    assert (rows[first]["up_to_date"], rows[first]["live"]) == (True, True)
    assert (rows[second]["up_to_date"], rows[second]["latest_version"]) == (False, 2)
    assert rows[first]["stats"]["clicks"]["spool_bytes"] == 200
    detail = reader.get(f"/api/v1/databus-agents/{first}")
    assert detail.status_code == 200
    assert detail.json() == rows[first]
    assert_error(reader.get("/api/v1/databus-agents/not-a-uuid"), 404, "not_found")
    other = client_for(roles={"globex": Role.TENANT_ADMIN})
    assert_error(other.get(f"/api/v1/databus-agents/{first}"), 404, "not_found")
    assert other.get("/api/v1/databus-agents").json()["results"] == []


def test_an_agent_silent_for_a_minute_is_not_live(acme: Tenant, client_for: Any) -> None:
    agent_id = uuid.uuid4()
    services.record_agent_heartbeat(
        acme, agent_id=agent_id, config_name="web", version=1, hostname="h", pid=1,
        started_at=timezone.now(), stats={}, principal="p",
        now=timezone.now() - timedelta(seconds=61),
    )  # fmt: skip
    body = client_for(roles={"acme": Role.VIEWER}).get(f"/api/v1/databus-agents/{agent_id}")
    assert body.json()["live"] is False


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"agent_id": "nope"}, "agent_id"),
        ({"agent_id": 12}, "agent_id"),
        ({"version": "1"}, "version"),
        ({"version": 1.0}, "version"),
        ({"version": -1}, "version"),
        ({"pid": True}, "pid"),
        ({"hostname": 7}, "hostname"),
        ({"started_at": "yesterday"}, "started_at"),
        ({"stats": []}, "stats"),
        ({"stats": stats(records_in="1")}, "stats.clicks.records_in"),
        ({"stats": stats(spool_age_s=True)}, "stats.clicks.spool_age_s"),
        ({"stats": stats(dropped=-1)}, "stats.clicks.dropped"),
        ({"stats": stats(extra=1)}, "stats.clicks.extra"),
        ({"stats": {"Bad Name": stats()["clicks"]}}, "stats.Bad Name"),
        ({"stats": {f"s{i}": stats()["clicks"] for i in range(1001)}}, "stats"),
    ],
)
def test_a_heartbeat_of_a_wrong_type_is_400_naming_the_field(
    acme: Tenant, client_for: Any, change: dict[str, Any], field: str
) -> None:
    body = {**heartbeat(str(uuid.uuid4())), **change}
    client = client_for(roles={"acme": Role.VIEWER})
    error = assert_error(
        client.post("/api/v1/databus-agents/heartbeat", body, format="json"), 400, "invalid"
    )
    assert field in error["details"], error
    assert not DatabusAgent.objects.exists()


def test_a_heartbeat_needs_a_role_in_the_tenant(acme: Tenant, client_for: Any) -> None:
    body = {**heartbeat(str(uuid.uuid4())), "tenant": "acme"}
    stranger = client_for(roles={"globex": Role.TENANT_ADMIN})
    assert_error(stranger.post("/api/v1/databus-agents/heartbeat", body, format="json"), 404)
    assert_error(APIClient().post("/api/v1/databus-agents/heartbeat", body, format="json"), 401)


def test_silent_agents_are_forgotten_by_the_task(acme: Tenant) -> None:
    now = timezone.now()
    for days, agent_id in [(8, uuid.uuid4()), (1, uuid.uuid4())]:
        services.record_agent_heartbeat(
            acme, agent_id=agent_id, config_name="web", version=1, hostname="h", pid=1,
            started_at=now, stats={}, principal="p", now=now - timedelta(days=days),
        )  # fmt: skip
    assert tasks.forget_silent_agents() == 1
    assert DatabusAgent.objects.count() == 1
    assert tasks.forget_silent_agents() == 0


def test_the_forgetting_task_is_on_the_beat_schedule(settings: Any) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["databus.forget_silent_agents"]
    assert entry["task"] == "databus.forget_silent_agents"
    assert entry["options"]["expires"] == entry["schedule"]


def test_another_identity_of_the_tenant_cannot_overwrite_an_agents_reports(
    acme: Tenant, local_identity: Any
) -> None:
    first, _ = service_account_client(acme)
    second, _ = service_account_client(acme)
    agent_id = str(uuid.uuid4())
    assert (
        first.post(
            "/api/v1/databus-agents/heartbeat", heartbeat(agent_id), format="json"
        ).status_code
        == 200
    )
    response = second.post("/api/v1/databus-agents/heartbeat", heartbeat(agent_id), format="json")
    assert response.status_code == 403
    assert (
        first.post(
            "/api/v1/databus-agents/heartbeat", heartbeat(agent_id), format="json"
        ).status_code
        == 200
    )
