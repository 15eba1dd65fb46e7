"""Credentials of deleted tenants and service accounts stop working at the API and at a
real broker, with the local issuer and with Keycloak: a tenant deleted and created again
with the same slug shares none of its credentials, and a deleted service account's
token is refused by the API at once and by the brokers from the controller's next push
(one tick)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rest_framework.test import APIClient

from controlplane.accounts import internal, services
from controlplane.accounts.identity import get_identity
from controlplane.controller.controller import Controller
from controlplane.controller.lease import FileLease
from controlplane.controller.push import MetadataPusher
from controlplane.core.actors import Actor
from controlplane.regions import services as regions
from controlplane.regions.models import Cluster
from controlplane.regions.provisioners import get_provisioner
from controlplane.tenants.lifecycle import deprovision_tenant
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import delete_tenant
from controlplane.topics.models import PartitionAssignment, Topic
from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.client.auth import ClientCredentials, StaticToken
from dataplane.client.connection import ChannelSecurity
from dataplane.errors import error_from_rpc
from tests.controlplane.accounts.test_broker_auth import _create_topic, api_url, broker_auth
from tests.controlplane.accounts.test_keycloak import (
    _password_token,
    _user_accepts_invite,
    keycloak,
    keycloak_realm,
)
from tests.controlplane.conftest import token_for
from tests.controlplane.topics.test_acl_brokers import _broker, _produce
from tests.support.brokers import BrokerProcess, stop_all
from tests.support.controlplane import make_tenant

__all__ = ["api_url", "broker_auth", "keycloak", "keycloak_realm"]  # fixtures used

ACTOR = Actor.system("tests")
NO_LIVE_TENANT = "UNAUTHENTICATED: the token names no live tenant"
NO_LIVE_ACCOUNT = "UNAUTHENTICATED: the token's service account no longer exists"


class Platform:
    """One authenticating broker of a static cluster, its region's controller, and the
    configured identity provider (``kind``: local or keycloak)."""

    def __init__(self, kind: str, cluster: Cluster, broker: BrokerProcess, controller: Any):
        self.kind, self.cluster, self.broker, self.controller = kind, cluster, broker, controller

    def tenant(self, slug: str) -> Tenant:
        tenant = make_tenant(slug)
        tenant.identity_ref = get_identity().provision_tenant(tenant)
        tenant.save()
        return tenant

    def tenant_admin_token(self, tenant: Tenant) -> str:
        """A token of a tenant-admin of ``tenant``, as its issuer gives one."""
        username = f"ash-{uuid.uuid4().hex[:6]}"
        member = services.invite_member(
            tenant, username=username, email=f"{username}@example.com", role="tenant-admin",
            actor=ACTOR,
        )  # fmt: skip
        if self.kind == "local":
            return token_for(get_identity(), roles={tenant.slug: "tenant-admin"}, username=username)
        from controlplane.accounts.keycloak import admin_for

        _user_accepts_invite(admin_for(tenant_realm()), member.subject, "ash-password")
        return _password_token(username, "ash-password")

    def add_topic(self, tenant: Tenant, name: str) -> str:
        broker = self.cluster.brokers.get()
        topic = Topic.objects.create(
            tenant=tenant, cluster=self.cluster, name=name, full_name=f"{tenant.slug}.{name}",
            partitions=1, retention_ms=3_600_000, retention_bytes=2**30, status="ready",
        )  # fmt: skip
        PartitionAssignment.objects.create(topic=topic, partition=0, broker=broker)
        _create_topic(self.broker, topic.full_name)
        return str(topic.full_name)

    def delete(self, tenant: Tenant) -> None:
        for member in tenant.memberships.all():
            services.remove_member(member, actor=ACTOR)
        delete_tenant(tenant, actor=ACTOR)
        assert deprovision_tenant(tenant.pk, actor=ACTOR)


def tenant_realm() -> str:
    from django.conf import settings

    return str(settings.KEYCLOAK_REALM)


@pytest.fixture(params=["local", "keycloak"])
def platform(
    request: pytest.FixtureRequest,
    transactional_db: None,
    settings: Any,
    broker_auth: None,
    tmp_path: Path,
) -> Iterator[Platform]:
    if request.param == "local":
        request.getfixturevalue("local_identity")
        settings.API_BASE_URL = request.getfixturevalue("api_url")
    else:
        request.getfixturevalue("keycloak")
    region = regions.create_region(name="revocation", actor=ACTOR)
    cluster = regions.create_cluster(
        region, name="rev", provisioner="static", broker_count=1, actor=ACTOR
    )
    broker = _broker(tmp_path, cluster.name)
    controller = Controller(
        region.name, "c1", FileLease(tmp_path / "rev.lock"),
        provisioner_for=get_provisioner, pusher=MetadataPusher(timeout_s=5.0),
    )  # fmt: skip
    try:
        regions.register_broker(
            cluster, broker_id=1, host="127.0.0.1", port=broker.port, actor=ACTOR
        )
        yield Platform(request.param, cluster, broker, controller)
    finally:
        controller.close()
        stop_all([broker])


def _api(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _metadata(broker: BrokerProcess, token: str, topic: str) -> str:
    """The broker's Metadata answer for ``topic``: its error, or the topic's."""
    with ChannelSecurity.of(StaticToken(token)).channel(broker.address) as channel:
        try:
            response = broker_pb2_grpc.BrokerStub(channel).Metadata(
                broker_pb2.MetadataRequest(topics=[topic]), timeout=10
            )
        except grpc.RpcError as exc:
            error = error_from_rpc(exc)
            return f"{error.code_name}: {error.message}"
    return f"topics {[(t.name, t.error) for t in response.topics]}"


def _produce_refusal(broker: BrokerProcess, token: str, topic: str) -> str:
    with ChannelSecurity.of(StaticToken(token)).channel(broker.address) as channel:
        try:
            broker_pb2_grpc.BrokerStub(channel).Produce(
                broker_pb2.ProduceRequest(
                    acks=1, partitions=[broker_pb2.PartitionRecords(topic=topic, partition=0)]
                ),
                timeout=10,
            )
        except grpc.RpcError as exc:
            error = error_from_rpc(exc)
            return f"{error.code_name}: {error.message}"
    return "NONE"


def _account_token(platform: Platform, tenant: Tenant, name: str) -> tuple[Any, str]:
    account, secret = services.create_service_account(tenant, name=name, actor=ACTOR)
    return account, ClientCredentials(internal.token_url(), account.client_id, secret).token()


def test_a_deleted_tenants_token_is_dead_in_a_new_tenant_of_its_slug(platform: Platform) -> None:
    old = platform.tenant("phoenix")
    old_admin = platform.tenant_admin_token(old)
    assert _api(old_admin).get("/api/v1/service-accounts").status_code == 200
    platform.delete(old)
    new = platform.tenant("phoenix")
    topic = platform.add_topic(new, "orders")
    platform.controller.tick()  # the push lists phoenix with its new id

    api = _api(old_admin)
    for path in ("service-accounts", "topics", "quotas", "audit-events", "members"):
        assert api.get(f"/api/v1/{path}").status_code == 401, path
    made = api.post("/api/v1/service-accounts", {"name": "backdoor"}, format="json")
    assert made.status_code == 401
    assert not new.service_accounts.exists()
    assert _metadata(platform.broker, old_admin, topic) == NO_LIVE_TENANT
    assert _produce_refusal(platform.broker, old_admin, topic) == NO_LIVE_TENANT
    assert _produce(platform.broker, old_admin, topic) == "UNAUTHENTICATED"

    new_admin = platform.tenant_admin_token(new)
    assert _api(new_admin).get("/api/v1/service-accounts").status_code == 200
    assert _produce(platform.broker, new_admin, topic) == "NONE"


def test_a_deleted_service_accounts_token_is_refused_within_a_tick(platform: Platform) -> None:
    tenant = platform.tenant("phoenix")
    topic = platform.add_topic(tenant, "orders")
    account, token = _account_token(platform, tenant, "app")
    platform.controller.tick()
    assert _api(token).get("/api/v1/auth/whoami").status_code == 200
    assert _produce(platform.broker, token, topic) == "NONE"

    services.delete_service_account(account, actor=ACTOR)
    assert _api(token).get("/api/v1/auth/whoami").status_code == 401  # at once
    platform.controller.tick()
    assert _produce_refusal(platform.broker, token, topic) == NO_LIVE_ACCOUNT
    assert _metadata(platform.broker, token, topic) == NO_LIVE_ACCOUNT

    # A new account of the same name is another identity: its token works at once (no
    # push needed), the old one stays dead.
    _, new_token = _account_token(platform, tenant, "app")
    assert _produce(platform.broker, new_token, topic) == "NONE"
    platform.controller.tick()
    assert _api(token).get("/api/v1/auth/whoami").status_code == 401
    assert _produce(platform.broker, token, topic) == "UNAUTHENTICATED"
    assert _produce(platform.broker, new_token, topic) == "NONE"
