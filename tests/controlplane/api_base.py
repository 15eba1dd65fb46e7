"""A generic API test base: the cases every tenant-scoped resource must pass.

How to use it for a resource (topics, service accounts, members, ...)::

    class TestTopicAPI(TenantScopedAPIContract):
        base_url = "/api/v1/topics"
        write_role = "developer"   # the weakest role that may create/update/delete
        weak_role = "viewer"       # a role that may read but not write
        delete_status = 202        # 204 when deleting is synchronous

        def make_object(self, tenant):          # one object of `tenant`, via its service;
            return create_topic(...).full_name   # returns its lookup value (the URL part)

        def create_payload(self, tenant):       # a valid POST body into `tenant`
            return {"tenant": tenant.slug, "name": "orders", "partitions": 3}

        def update_payload(self):               # a valid PATCH body
            return {"partitions": 4}

        def lookup_of(self, body):              # the lookup value in a response body
            return body["full_name"]

Override ``prepare(self)`` to create what the resource needs besides the two tenants
(regions, clusters). ``tenant`` and ``other_tenant`` are rows made directly, with the
default quota. ``transaction.on_commit`` callbacks do not run under the ``db`` fixture,
so nothing is provisioned or reconciled by these tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.core.choices import Role
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.tenants.models import Tenant
from tests.support.controlplane import make_tenant


def make_cluster(region: str = "local", name: str = "c1", brokers: int = 3) -> Cluster:
    """A ready cluster with ``brokers`` broker rows (fake ports: no processes)."""
    region_row, _ = Region.objects.get_or_create(name=region)
    cluster = Cluster.objects.create(
        region=region_row, name=name, status="ready", broker_count=brokers
    )
    for broker_id in range(1, brokers + 1):
        Broker.objects.create(
            cluster=cluster, broker_id=broker_id, port=40000 + broker_id, phase="ready"
        )
    return cluster  # type: ignore[no-any-return]


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """The response has ``status`` and the API's one error body; returns the error."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]  # type: ignore[no-any-return]


class TenantScopedAPIContract:
    base_url: str = ""
    write_role: str = Role.DEVELOPER
    weak_role: str = Role.VIEWER
    delete_status: int = 202

    # -- hooks a resource's test class fills in --------------------------------------------
    def prepare(self) -> None:
        """Create what objects of the resource need (regions, clusters...)."""

    def make_object(self, tenant: Tenant) -> str:
        raise NotImplementedError

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        raise NotImplementedError

    def update_payload(self) -> dict[str, Any]:
        raise NotImplementedError

    def lookup_of(self, body: dict[str, Any]) -> str:
        raise NotImplementedError

    # -- fixtures ------------------------------------------------------------------------
    @pytest.fixture(autouse=True)
    def _world(self, db: None, client_for: Any, anonymous_client: APIClient) -> None:
        self.tenant = make_tenant("acme")
        self.other_tenant = make_tenant("globex")
        self.prepare()
        self.client_for = client_for
        self.anonymous = anonymous_client

    def client(self, role: str | None, tenant: Tenant | None = None) -> APIClient:
        """A caller holding ``role`` in ``tenant`` (default: ``self.tenant``)."""
        slug = (tenant or self.tenant).slug
        return self.client_for(roles={slug: role} if role else {})

    def url(self, lookup: str | None = None) -> str:
        return self.base_url if lookup is None else f"{self.base_url}/{lookup}"

    # -- anonymous: 401 ------------------------------------------------------------------
    def test_anonymous_cannot_list(self) -> None:
        assert_error(self.anonymous.get(self.url()), 401, "not_authenticated")

    def test_anonymous_cannot_retrieve_update_or_delete(self) -> None:
        lookup = self.make_object(self.tenant)
        assert_error(self.anonymous.get(self.url(lookup)), 401)
        assert_error(
            self.anonymous.patch(self.url(lookup), self.update_payload(), format="json"), 401
        )
        assert_error(self.anonymous.delete(self.url(lookup)), 401)

    def test_anonymous_cannot_create(self) -> None:
        response = self.anonymous.post(self.url(), self.create_payload(self.tenant), format="json")
        assert_error(response, 401)

    def test_a_bad_token_is_401(self) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Bearer not-a-jwt")
        assert_error(client.get(self.url()), 401, "authentication_failed")

    # -- another tenant's objects do not exist: 404, invisible in lists ------------------------
    def test_other_tenants_objects_are_not_listed(self) -> None:
        mine = self.make_object(self.tenant)
        theirs = self.make_object(self.other_tenant)
        response = self.client(Role.TENANT_ADMIN).get(self.url(), {"limit": 1000})
        assert response.status_code == 200, response.content
        listed = {self.lookup_of(row) for row in response.json()["results"]}
        assert mine in listed
        assert theirs not in listed

    def test_other_tenants_object_is_404_to_read_update_and_delete(self) -> None:
        theirs = self.make_object(self.other_tenant)
        client = self.client(Role.TENANT_ADMIN)
        assert_error(client.get(self.url(theirs)), 404, "not_found")
        assert_error(client.patch(self.url(theirs), self.update_payload(), format="json"), 404)
        assert_error(client.delete(self.url(theirs)), 404)
        # ...and it is untouched.
        owner = self.client(Role.VIEWER, self.other_tenant)
        assert owner.get(self.url(theirs)).status_code == 200

    @pytest.mark.parametrize("lookup", ["a%00b", "no.such", "%0A%24.", "x" * 300])
    def test_a_malformed_lookup_is_a_json_404(self, lookup: str) -> None:
        assert_error(self.client(Role.TENANT_ADMIN).get(self.url(lookup)), 404, "not_found")

    def test_creating_into_another_tenant_is_404(self) -> None:
        client = self.client(Role.TENANT_ADMIN)
        response = client.post(self.url(), self.create_payload(self.other_tenant), format="json")
        assert_error(response, 404, "not_found")

    # -- a role too weak: 403 ----------------------------------------------------------------
    def test_weak_role_cannot_create(self) -> None:
        response = self.client(self.weak_role).post(
            self.url(), self.create_payload(self.tenant), format="json"
        )
        assert_error(response, 403, "permission_denied")

    def test_weak_role_can_read_but_not_update_or_delete(self) -> None:
        lookup = self.make_object(self.tenant)
        client = self.client(self.weak_role)
        assert client.get(self.url(lookup)).status_code == 200
        response = client.patch(self.url(lookup), self.update_payload(), format="json")
        assert_error(response, 403, "permission_denied")
        assert_error(client.delete(self.url(lookup)), 403, "permission_denied")

    # -- the writer's cases ------------------------------------------------------------------
    def test_create(self) -> None:
        response = self.client(self.write_role).post(
            self.url(), self.create_payload(self.tenant), format="json"
        )
        assert response.status_code == 201, response.content
        lookup = self.lookup_of(response.json())
        fetched = self.client(Role.VIEWER).get(self.url(lookup))
        assert fetched.status_code == 200
        assert fetched.json() == response.json()

    def test_update(self) -> None:
        lookup = self.make_object(self.tenant)
        payload = self.update_payload()
        response = self.client(self.write_role).patch(self.url(lookup), payload, format="json")
        assert response.status_code == 200, response.content
        body = response.json()
        for field, value in payload.items():
            assert body[field] == value, field

    def test_delete(self) -> None:
        lookup = self.make_object(self.tenant)
        response = self.client(self.write_role).delete(self.url(lookup))
        assert response.status_code == self.delete_status, response.content
        if self.delete_status == 202:
            assert response.json()["status"] == "deleting"
        else:
            assert self.client(Role.VIEWER).get(self.url(lookup)).status_code == 404
