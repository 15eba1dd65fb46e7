"""Topics per region: a name means the origin, ``?region=`` the copy there; an origin
with copies is not deleted, a copy a link keeps is changed through its origin; ACL
entries name a copy by region."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.core.choices import Role
from tests.controlplane.api_base import assert_error
from tests.controlplane.mirrors.support import copy_of, link, mirror_tenant, topic, two_regions


@pytest.mark.django_db
def test_topics_api_deleting_an_origin_with_copies_is_409(client_for: Any) -> None:
    two_regions()
    tenant = mirror_tenant()
    topic(tenant)
    link(tenant)
    client = client_for(roles={"acme": Role.DEVELOPER})
    assert_error(client.delete("/api/v1/topics/acme.orders"), 409, "mirror_copies_exist")
    response = client.delete("/api/v1/topics/acme.orders?region=west")
    assert_error(response, 409, "mirror_copy")
    response = client.patch("/api/v1/topics/acme.orders?region=west", {"partitions": 9},
                            format="json")  # fmt: skip
    assert_error(response, 409, "mirror_copy")
    grown = client.patch("/api/v1/topics/acme.orders", {"partitions": 4}, format="json")
    assert (grown.status_code, grown.json()["region"]) == (200, "east")
    assert copy_of("acme.orders").partitions == 4
    assert client.get("/api/v1/topics/acme.orders?region=north").status_code == 404


@pytest.mark.django_db
def test_topic_acls_name_a_copy_by_region(client_for: Any) -> None:
    two_regions()
    tenant = mirror_tenant()
    topic(tenant)
    link(tenant)
    admin = client_for(roles={"acme": Role.TENANT_ADMIN})
    body = {"topic": "acme.orders", "principal": "someone", "operations": ["consume"]}
    on_copy = admin.post("/api/v1/topic-acls", {**body, "region": "west"}, format="json")
    assert on_copy.status_code == 201, on_copy.content
    assert on_copy.json()["region"] == "west"
    on_origin = admin.post("/api/v1/topic-acls", body, format="json")
    assert on_origin.json()["region"] == "east"
