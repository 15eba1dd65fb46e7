"""Who reaches console pages: the session's token decides, as a bearer token does in
the API; another tenant answers like a missing one; headers and error pages."""

from __future__ import annotations

import pytest
from django.test import Client

from controlplane.tenants.models import Tenant
from tests.web.pages.conftest import ConsoleFactory, signed_in_client, unmasked


def test_no_session_token_redirects_to_sign_in_with_next(acme: Tenant) -> None:
    response = Client().get("/console/t/acme/topics/?name=x")
    assert response.status_code == 302
    assert (
        response["Location"]
        == "/console/auth/login?next=%2Fconsole%2Ft%2Facme%2Ftopics%2F%3Fname%3Dx"
    )


@pytest.mark.usefixtures("local_identity")
def test_an_invalid_session_token_redirects_to_sign_in(acme: Tenant) -> None:
    response = signed_in_client("not.a.token").get("/console/t/acme/")
    assert response.status_code == 302
    assert response["Location"].startswith("/console/auth/login?next=")


def test_a_token_of_a_deleted_tenant_redirects_to_sign_in(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    Tenant.objects.filter(pk=acme.pk).update(uid="00000000-0000-0000-0000-000000000001")
    response = client.get("/console/t/acme/")
    assert response.status_code == 302


def test_a_member_of_one_tenant_lands_on_its_dashboard(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    response = console_for(roles={"acme": "viewer"}).get("/console/")
    assert response.status_code == 302
    assert response["Location"] == "/console/t/acme/"


def test_a_member_of_several_tenants_gets_the_switcher(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "viewer", "globex": "developer"})
    index = client.get("/console/")
    assert index.status_code == 200
    page = client.get("/console/t/acme/").content.decode()
    assert 'aria-label="Tenants"' in page
    assert 'href="/console/t/globex/"' in page


def test_a_tenant_without_a_role_answers_like_a_missing_one(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "tenant-admin"})
    other = client.get("/console/t/globex/")
    missing = client.get("/console/t/nosuch/")
    assert other.status_code == missing.status_code == 404
    assert unmasked(other.content) == unmasked(missing.content)
    assert b"Not found" in other.content


def test_a_platform_admin_sees_any_tenant(acme: Tenant, console_for: ConsoleFactory) -> None:
    response = console_for(platform_admin=True, username="operator").get("/console/t/acme/")
    assert response.status_code == 200
    assert b"platform admin" in response.content


def test_pages_forbid_inline_script_and_framing(acme: Tenant, console_for: ConsoleFactory) -> None:
    response = console_for(roles={"acme": "viewer"}).get("/console/t/acme/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    assert "frame-ancestors 'none'" in policy
    assert response["X-Frame-Options"] == "DENY"
    assert b"<script>" not in response.content  # only <script src=...>


def test_an_unknown_console_url_is_the_console_404_page(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    response = console_for(roles={"acme": "viewer"}).get("/console/t/acme/nothing/here/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_a_failing_page_shows_no_trace_or_path(
    acme: Tenant, console_for: ConsoleFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(tenant: Tenant) -> None:
        raise RuntimeError("boom at /var/lib/meridian/secret 10.0.0.7:9092")

    monkeypatch.setattr("web.views.dashboard.quota_usage", fail)
    client = console_for(roles={"acme": "viewer"})
    client.raise_request_exception = False
    response = client.get("/console/t/acme/")
    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong" in page
    assert "/var/lib" not in page
    assert "9092" not in page
    assert "Traceback" not in page


def test_vendored_scripts_are_served_by_the_control_plane(db: None) -> None:
    for path in (
        "/console/static/web/vendor/htmx/htmx.min.js",
        "/console/static/web/vendor/uplot/uPlot.iife.min.js",
        "/console/static/web/console.css",
    ):
        response = Client().get(path)
        assert response.status_code == 200, path


def test_a_form_without_its_csrf_token_is_refused_with_the_console_page(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    client.handler.enforce_csrf_checks = True
    response = client.post("/console/t/acme/topics/new/", {"name": "orders", "partitions": "1"})
    assert response.status_code == 403
    assert b"Reload the page" in response.content
    assert not acme.topics.exists()
