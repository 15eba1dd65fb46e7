"""Signing in to the console in Chromium: through Keycloak's real login page and through
the local issuer's form (one code path in the console), a wrong password refused,
logout that ends the provider's session too, CSRF on logout, the access token refreshed
before it expires, and a person of no tenant shown no tenant."""

from __future__ import annotations

import uuid

from django.contrib.sessions.backends.db import SessionStore
from keycloak import KeycloakAdmin
from playwright.sync_api import expect

from controlplane.accounts import services
from controlplane.accounts.identity import get_identity
from controlplane.accounts.keycloak import admin_for
from controlplane.accounts.local import member_subject
from controlplane.accounts.models import RefreshToken
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.tenants.models import Membership, Tenant
from tests.support.controlplane import make_tenant
from tests.web.conftest import Ui
from web.auth import session as console_session

SYSTEM = Actor.system("tests")
PASSWORD = "a demo password 1"
SESSION_PAGE = "/console/auth/session"


def _local_member(username: str, tenant: Tenant | None, role: str = "developer") -> None:
    services.set_local_password(username, PASSWORD, actor=SYSTEM)
    if tenant is not None:
        Membership.objects.create(
            tenant=tenant,
            subject=member_subject(username),
            username=username,
            role=role,
            status=ProvisioningStatus.READY,
        )


def _local_sign_in(ui: Ui, console: str, username: str, password: str = PASSWORD) -> None:
    ui.page.goto(console + SESSION_PAGE)
    expect(ui.page.get_by_role("heading", name="Sign in to Meridian")).to_be_visible()
    ui.check("issuer-sign-in-form")
    ui.page.get_by_label("Username").fill(username)
    ui.page.get_by_label("Password").fill(password)
    ui.page.get_by_role("button", name="Sign in").click()


def _session_key(ui: Ui) -> str:
    cookies = {c["name"]: c["value"] for c in ui.page.context.cookies()}
    return cookies["sessionid"]


def test_local_sign_in_refresh_and_sign_out(ui: Ui, console: str) -> None:
    _local_member("dev", make_tenant("acme"))
    _local_sign_in(ui, console, "dev")
    expect(ui.page.locator("#username")).to_have_text("dev")
    expect(ui.page.locator("#tenant-roles")).to_contain_text("acme")
    expect(ui.page.locator("#tenant-roles")).to_contain_text("developer")
    ui.check("session")

    # An access token about to expire is replaced before the page uses it.
    store = SessionStore(session_key=_session_key(ui))
    first_token = store[console_session.ACCESS_TOKEN]
    store[console_session.EXPIRES_AT] = 0
    store.save()
    ui.page.reload()
    expect(ui.page.locator("#username")).to_have_text("dev")
    refreshed = SessionStore(session_key=_session_key(ui))
    assert refreshed[console_session.ACCESS_TOKEN] != first_token
    assert get_identity().verify(refreshed[console_session.ACCESS_TOKEN])["sub"] == (
        member_subject("dev")
    )

    visited: list[str] = []
    ui.page.on("request", lambda request: visited.append(request.url))
    ui.page.get_by_role("button", name="Sign out").click()
    expect(ui.page.get_by_role("heading", name="You are signed out")).to_be_visible()
    ui.check("signed-out")
    # Through the issuer's end-session endpoint, with an ID token hint it accepted (no
    # confirmation asked).
    assert any("/api/v1/auth/logout?" in url and "id_token_hint=" in url for url in visited)
    # The issuer's session ended too: the way back asks for the password again.
    ui.page.goto(console + SESSION_PAGE)
    expect(ui.page.get_by_label("Password")).to_be_visible()
    ui.shot("asked-again")


def test_a_refused_refresh_ends_the_console_session(ui: Ui, console: str) -> None:
    _local_member("dev", make_tenant("acme"))
    _local_sign_in(ui, console, "dev")
    expect(ui.page.locator("#username")).to_have_text("dev")
    RefreshToken.objects.all().delete()  # the provider forgot the session
    store = SessionStore(session_key=_session_key(ui))
    store[console_session.EXPIRES_AT] = 0
    store.save()
    ui.page.goto(console + SESSION_PAGE)
    expect(ui.page.get_by_label("Password")).to_be_visible()
    ui.shot("signed-out-by-refresh")


def test_local_wrong_password_is_refused(ui: Ui, console: str) -> None:
    _local_member("dev", make_tenant("acme"))
    _local_sign_in(ui, console, "dev", password="not the password")
    expect(ui.page.get_by_role("alert")).to_have_text("Wrong username or password.")
    ui.check("wrong-password")
    ui.page.goto(console + SESSION_PAGE)
    expect(ui.page.get_by_label("Password")).to_be_visible()  # still not signed in


def test_a_person_of_no_tenant_sees_no_tenant(ui: Ui, console: str) -> None:
    make_tenant("acme")
    _local_member("stranger", None)
    _local_sign_in(ui, console, "stranger")
    expect(ui.page.locator("#username")).to_have_text("stranger")
    expect(ui.page.locator("#no-tenants")).to_be_visible()
    expect(ui.page.locator("main")).not_to_contain_text("acme")
    ui.check("no-tenant")


def test_logout_needs_the_csrf_token(ui: Ui, console: str) -> None:
    _local_member("dev", make_tenant("acme"))
    _local_sign_in(ui, console, "dev")
    expect(ui.page.locator("#username")).to_have_text("dev")
    forged = ui.page.request.post(console + "/console/auth/logout", max_redirects=0)
    assert forged.status == 403
    assert ui.page.request.get(console + "/console/auth/logout").status == 405
    ui.page.reload()
    expect(ui.page.locator("#username")).to_have_text("dev")  # still signed in


def _keycloak_member(admin: KeycloakAdmin, tenant: Tenant, username: str) -> None:
    """A member invited through the service, who has then set a password and filled in
    the profile (what Keycloak asks on first login)."""
    membership = services.invite_member(
        tenant, username=username, email=f"{username}@example.com", role="developer",
        actor=SYSTEM,
    )  # fmt: skip
    admin.update_user(
        membership.subject,
        {"firstName": username, "lastName": "tester", "emailVerified": True,
         "requiredActions": []},
    )  # fmt: skip
    admin.set_user_password(membership.subject, PASSWORD, temporary=False)


def _keycloak_login(ui: Ui, username: str, password: str) -> None:
    ui.page.locator("#username").fill(username)
    ui.page.locator("#password").fill(password)
    ui.page.locator("#kc-login").click()


def test_keycloak_sign_in_wrong_password_and_logout(ui: Ui, keycloak_console: str) -> None:
    tenant = make_tenant(f"kc-{uuid.uuid4().hex[:6]}")
    tenant.identity_ref = get_identity().provision_tenant(tenant)
    tenant.save()
    admin = admin_for(get_identity().realm)  # type: ignore[attr-defined]
    _keycloak_member(admin, tenant, "kc-dev")

    ui.page.goto(keycloak_console + SESSION_PAGE)
    expect(ui.page.locator("#kc-login")).to_be_visible()  # Keycloak's own login page
    ui.shot("keycloak-login")
    _keycloak_login(ui, "kc-dev", "not the password")
    expect(ui.page.locator("main")).to_contain_text("Invalid username or password")
    ui.shot("keycloak-wrong-password")
    _keycloak_login(ui, "kc-dev", PASSWORD)
    expect(ui.page.locator("#username")).to_have_text("kc-dev")
    expect(ui.page.locator("#tenant-roles")).to_contain_text(tenant.slug)
    ui.check("session")

    visited: list[str] = []
    ui.page.on("request", lambda request: visited.append(request.url))
    ui.page.get_by_role("button", name="Sign out").click()
    expect(ui.page.get_by_role("heading", name="You are signed out")).to_be_visible()
    ui.check("signed-out")
    assert any("/protocol/openid-connect/logout?" in url for url in visited)
    ui.page.goto(keycloak_console + SESSION_PAGE)
    expect(ui.page.locator("#password")).to_be_visible()  # Keycloak asks again
    ui.shot("keycloak-asks-again")
