"""Tenant isolation across every endpoint of the API, read from the OpenAPI document so
that a new endpoint is covered the day it is added.

Tenant ``acme`` owns a topic, a topic ACL entry, a service account, a member, a lane,
a Databus configuration and agent, an export and its run, an index, a mirror link, a
retry policy, audit events and a quota (and names a delayed record's id).
A tenant-admin of ``beta`` (the strongest tenant role) then calls every operation:
- no list answer names anything of ``acme``, with or without ``?tenant=acme``;
- every operation on an ``acme`` object answers exactly as it does for an object that
  does not exist (same status, same body once the looked-up value is blanked), so the
  caller cannot even learn that the object exists;
- nothing of ``acme`` changed afterwards.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from controlplane.accounts import services as accounts
from controlplane.core.actors import Actor
from controlplane.core.audit import snapshot
from controlplane.core.models import AuditEvent
from controlplane.databus import services as databus
from controlplane.databus.models import DatabusAgent, DatabusConfig
from controlplane.exports import services as exports
from controlplane.exports.models import Export, ExportRun
from controlplane.indexes import services as indexes
from controlplane.indexes.models import Index
from controlplane.lanes.models import Lane
from controlplane.lanes.services import create_lane
from controlplane.lanes.services import snapshot as lane_snapshot
from controlplane.mirrors import services as mirrors
from controlplane.mirrors.models import MirrorLink
from controlplane.quotas.models import Quota
from controlplane.retries.models import RetryPolicy
from controlplane.retries.services import create_retry_policy
from controlplane.tenants.models import Membership
from controlplane.topics.acls import grant_topic_acl
from controlplane.topics.models import Topic, TopicAcl
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import make_cluster, make_tenant
from tests.controlplane.conftest import token_for

SECRET_TOPIC = "secret-orders"
SECRET_ACCOUNT = "secret-app"
SECRET_MEMBER = "secret-person"
SECRET_LANE = "secret-lane"
SECRET_CONFIG = "secret-config"
SECRET_AGENT = "5ec7e7a9-0000-4000-8000-000000000001"
SECRET_EXPORT = "secret-export"
SECRET_INDEX = "secret-index"
SECRET_MIRROR = "secret-mirror"
SECRET_GROUP = "secret-group"
# Path parameters: for each, the value of acme's object and one that exists nowhere.
_PARAM = re.compile(r"\{(\w+)\}")


@pytest.fixture
def world(db: None, local_identity: Any, tmp_path: Any, monkeypatch: Any) -> dict[str, Any]:
    cluster = make_cluster()
    cluster.remote_store_uri = str(tmp_path / "store")
    cluster.save()
    monkeypatch.setattr(exports, "_enqueue", lambda e, r: None)
    west = make_cluster("west").region
    acme = make_tenant("acme", region=cluster.region)
    acme.regions.set([west])
    make_tenant("beta")
    operator = Actor.system("test")
    topic = create_topic(acme, name=SECRET_TOPIC, partitions=3, actor=operator)
    account, _ = accounts.create_service_account(acme, name=SECRET_ACCOUNT, actor=operator)
    acl = grant_topic_acl(topic, principal=account.client_id, operations=["consume"],
                          actor=operator)  # fmt: skip
    member = accounts.invite_member(
        acme, username=SECRET_MEMBER, email="secret@acme.test", role="viewer", actor=operator
    )
    create_lane(acme, name=SECRET_LANE, actor=operator)
    document = {"streams": {"s": {"topic": topic.full_name}}}
    databus.create_databus_config(acme, name=SECRET_CONFIG, document=document, actor=operator)
    databus.record_agent_heartbeat(
        acme, agent_id=SECRET_AGENT, config_name=SECRET_CONFIG, version=1, hostname="h",
        pid=1, started_at=topic.created_at, stats={}, principal="p",
    )  # fmt: skip
    tiered = create_topic(acme, name="tiered", partitions=1, remote_storage=True, actor=operator)
    export = exports.create_export(acme, name=SECRET_EXPORT, topic=tiered, actor=operator)
    exports.request_run(export, actor=operator)
    fields = [{"name": "user_id", "path": "user.id", "type": "long"}]
    indexes.create_index(acme, name=SECRET_INDEX, topic=tiered, fields=fields, actor=operator)
    mirrors.create_link(
        acme, name=SECRET_MIRROR, source_region=cluster.region, target_region=west,
        topics=[SECRET_TOPIC], actor=operator,
    )  # fmt: skip
    create_retry_policy(acme, group=SECRET_GROUP, actor=operator)
    event = AuditEvent.objects.filter(tenant_slug="acme").first()
    assert event is not None
    return {
        "acme_values": {
            "tenants": "acme",
            "quotas": "acme",
            "topics": topic.full_name,
            "topic-acls": str(acl.pk),
            "service-accounts": str(account.pk),
            "members": str(member.pk),
            "audit-events": str(event.pk),
            "lanes": SECRET_LANE,
            "databus-configs": SECRET_CONFIG,
            "databus-agents": SECRET_AGENT,
            "exports": SECRET_EXPORT,
            "indexes": SECRET_INDEX,
            "mirrors": SECRET_MIRROR,
            "retry-policies": SECRET_GROUP,
            "delayed-records": f"{topic.full_name}:0:0",
        },
        "missing_values": {
            "tenants": "zzzz",
            "quotas": "zzzz",
            "topics": "zzzz.nothing",
            "topic-acls": "999999",
            "service-accounts": "999999",
            "members": "999999",
            "audit-events": "999999",
            "lanes": "zzzz-lane",
            "databus-configs": "zzzz-config",
            "databus-agents": "5ec7e7a9-0000-4000-8000-000000000002",
            "exports": "zzzz-export",
            "indexes": "zzzz-index",
            "mirrors": "zzzz-mirror",
            "retry-policies": "zzzz-group",
            "delayed-records": "zzzz.nothing:0:0",
        },
        "token": token_for(local_identity, roles={"beta": "tenant-admin"}, username="mallory"),
    }


def _operations(client: Client) -> list[tuple[str, str]]:
    schema = client.get("/api/v1/openapi.json").json()
    return [
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in {"get", "post", "patch", "put", "delete"}
    ]


def _resource(path: str) -> str:
    return path.removeprefix("/api/v1/").split("/")[0]


def _fill(path: str, values: dict[str, str]) -> str | None:
    resource = _resource(path)
    if not _PARAM.search(path):
        return path
    if resource not in values:
        return None  # an operation on a platform object (regions, brokers, ...)
    return _PARAM.sub(values[resource], path, count=1)


def _call(client: Client, method: str, path: str, token: str, body: dict[str, Any]) -> Any:
    kwargs: dict[str, Any] = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if method in {"POST", "PATCH", "PUT"}:
        kwargs.update(data=json.dumps(body), content_type="application/json")
    return getattr(client, method.lower())(path, **kwargs)


def _acme_state() -> Any:
    return (
        [snapshot(t) for t in Topic.objects.filter(tenant__slug="acme")],
        [snapshot(m) for m in Membership.objects.filter(tenant__slug="acme")],
        [snapshot(q) for q in Quota.objects.filter(tenant__slug="acme")],
        [snapshot(a) for a in TopicAcl.objects.filter(topic__tenant__slug="acme")],
        [lane_snapshot(lane) for lane in Lane.objects.filter(tenant__slug="acme")],
        [snapshot(c) for c in DatabusConfig.objects.filter(tenant__slug="acme")],
        [snapshot(a) for a in DatabusAgent.objects.filter(tenant__slug="acme")],
        [snapshot(e) for e in Export.objects.filter(tenant__slug="acme")],
        [snapshot(r) for r in ExportRun.objects.filter(export__tenant__slug="acme")],
        [snapshot(i) for i in Index.objects.filter(tenant__slug="acme")],
        [mirrors.snapshot(m) for m in MirrorLink.objects.filter(tenant__slug="acme")],
        [snapshot(p) for p in RetryPolicy.objects.filter(tenant__slug="acme")],
        sorted(
            accounts.ServiceAccount.objects.filter(tenant__slug="acme").values_list(
                "client_id", "role", "secret_hash"
            )
        ),
    )


def _leaks(text: str) -> list[str]:
    secrets = (
        "acme", SECRET_TOPIC, SECRET_ACCOUNT, SECRET_MEMBER, SECRET_LANE, SECRET_CONFIG,
        SECRET_AGENT, SECRET_EXPORT, SECRET_INDEX, SECRET_MIRROR, SECRET_GROUP,
    )  # fmt: skip
    return [s for s in secrets if s in text]


def test_no_endpoint_lets_one_tenant_learn_or_touch_another_tenants_objects(
    world: dict[str, Any],
) -> None:
    client = Client()
    token = world["token"]
    before = _acme_state()
    body = {
        "tenant": "acme",
        "name": "x",
        "partitions": 1,
        "role": "viewer",
        "username": "x",
        "topic": "x",
        "principal": "x",
        "operations": ["consume"],
    }
    checked = 0
    for method, path in _operations(client):
        if path.endswith("/auth/token"):
            continue  # takes client credentials, not a bearer token
        acme_path = _fill(path, world["acme_values"])
        if acme_path is None:
            continue
        if acme_path == path and method == "GET":
            for query in ("", "?tenant=acme"):
                response = _call(client, method, path + query, token, body)
                assert response.status_code in (200, 403), (path, response.status_code)
                assert _leaks(response.content.decode()) == [], (path + query, response.content)
            checked += 1
            continue
        if acme_path == path:  # a create: into acme, as into a tenant that does not exist
            seen = _call(client, method, path, token, body)
            unseen = _call(client, method, path, token, {**body, "tenant": "zzzz"})
            assert seen.status_code in (403, 404), (method, path, seen.content)
            assert seen.status_code == unseen.status_code, (method, path, seen.content)
            assert seen.content.decode().replace("acme", "?") == unseen.content.decode().replace(
                "zzzz", "?"
            ), (method, path)
            checked += 1
            continue
        missing_path = _fill(path, world["missing_values"])
        assert missing_path is not None
        seen = _call(client, method, acme_path, token, body)
        unseen = _call(client, method, missing_path, token, body)
        assert seen.status_code == unseen.status_code, (method, path, seen.content)
        assert seen.status_code in (403, 404), (method, path, seen.status_code)
        blank = world["acme_values"][_resource(path)]
        other = world["missing_values"][_resource(path)]
        assert seen.content.decode().replace(blank, "?") == unseen.content.decode().replace(
            other, "?"
        ), (method, path)
        checked += 1
    assert checked >= 20, f"only {checked} operations checked: did the schema change?"
    assert _acme_state() == before


def test_a_service_account_name_tells_nothing_of_other_tenants_accounts(
    db: None, local_identity: Any
) -> None:
    """A client id is ``<tenant>--<name>``: a name that would spell another tenant's
    client id is refused as invalid whether or not that account exists, and a name in
    use in another tenant is free in this one."""
    operator = Actor.system("test")
    make_tenant("acme")
    # A slug from before "--" was refused: its accounts' client ids start "acme--prod--".
    legacy = make_tenant("acme--prod")
    accounts.create_service_account(legacy, name="ci1", actor=operator)
    beta = make_tenant("beta")
    accounts.create_service_account(beta, name="ingest", actor=operator)
    client = Client()
    token = token_for(local_identity, roles={"acme": "tenant-admin"}, username="mallory")
    body = {"tenant": "acme", "name": "prod--ci1"}
    existing = _call(client, "POST", "/api/v1/service-accounts", token, body)
    missing = _call(client, "POST", "/api/v1/service-accounts", token, {**body, "name": "prod--cd"})
    assert existing.status_code == missing.status_code == 400, existing.content
    assert "name" in existing.json()["error"]["details"]
    assert existing.content.decode().replace("ci1", "?") == missing.content.decode().replace(
        "cd", "?"
    )
    taken_elsewhere = {"tenant": "acme", "name": "ingest"}
    created = _call(client, "POST", "/api/v1/service-accounts", token, taken_elsewhere)
    assert created.status_code == 201, created.content
    assert created.json()["client_id"] == "acme--ingest"
