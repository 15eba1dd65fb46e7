"""The tenant dashboard: usage against every quota, recent changes for administrators."""

from __future__ import annotations

import re

import pytest

from controlplane.core.actors import Actor
from controlplane.tenants.models import Tenant
from controlplane.topics import services
from tests.web.pages.conftest import ConsoleFactory

ROLES = ["viewer", "developer", "tenant-admin"]


@pytest.mark.parametrize("role", ROLES)
def test_the_dashboard_shows_usage_against_every_quota(
    role: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    services.create_topic(acme, name="orders", partitions=3, actor=Actor.system("test"))
    response = console_for(roles={"acme": role}).get("/console/t/acme/")
    assert response.status_code == 200
    page = response.content.decode()
    for quota in ("max_topics", "max_partitions", "max_storage_bytes", "produce_bytes_per_s",
                  "fetch_bytes_per_s", "requests_per_s", "max_lanes", "max_mirrors"):  # fmt: skip
        assert f'id="quota-{quota}"' in page
    assert f'max="{acme.quota.max_topics}" value="1"' in page
    assert f'max="{acme.quota.max_partitions}" value="3"' in page
    rows = dict(re.findall(r'<tr id="quota-(\w+)">(.*?)</tr>', page, re.S))
    assert re.search(r"<td>\d+/s</td>", rows["requests_per_s"])
    assert "enforced by brokers" in rows["requests_per_s"]
    for count in ("max_lanes", "max_mirrors"):  # counts, not rates
        assert re.search(r"<td>\d+</td>", rows[count])
        assert "enforced by brokers" not in rows[count]


def test_administrators_see_recent_changes(acme: Tenant, console_for: ConsoleFactory) -> None:
    services.create_topic(acme, name="orders", partitions=1, actor=Actor.system("test"))
    admin_page = console_for(roles={"acme": "tenant-admin"}).get("/console/t/acme/")
    viewer_page = console_for(roles={"acme": "viewer"}).get("/console/t/acme/")
    assert b"topic.create" in admin_page.content
    assert b"topic.create" not in viewer_page.content
    assert b"The audit log is for tenant administrators" in viewer_page.content


def test_the_layout_names_the_user_and_every_section(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    page = console_for(roles={"acme": "viewer"}, username="ada").get("/console/t/acme/")
    text = page.content.decode()
    assert "Signed in as <strong>ada</strong> (viewer)" in text
    for section in ("Dashboard", "Topics", "Consumer groups", "Service accounts", "ACLs",
                    "Members", "Audit log"):  # fmt: skip
        assert section in text
