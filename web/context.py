"""What the base layout shows on every console page: the signed-in user, their tenants
(the switcher), the current tenant and the sign-out link."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from web.access import SIGN_OUT_URL_NAME


def sign_out_url() -> str:
    """Sign-out's URL (a POST with the CSRF token)."""
    return reverse(SIGN_OUT_URL_NAME)


# The console's sections, by URL name; a section whose page is not built yet is shown
# without a link.
SECTIONS = (
    ("Dashboard", "web:dashboard"),
    ("Topics", "web:topic-list"),
    ("Consumer groups", "web:group-list"),
    ("Delayed", "web:delayed-list"),
    ("Retries", "web:retry-list"),
    ("Transactions", "web:transaction-list"),
    ("Lanes", "web:lane-list"),
    ("Databus", "web:databus-list"),
    ("Exports", "web:export-list"),
    ("Indexes", "web:index-list"),
    ("Mirrors", "web:mirror-list"),
    ("Service accounts", "web:service-account-list"),
    ("ACLs", "web:acl-list"),
    ("Members", "web:member-list"),
    ("Audit log", "web:audit-list"),
)


def sections(tenant_slug: str) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for label, name in SECTIONS:
        try:
            out.append((label, reverse(name, kwargs={"tenant": tenant_slug})))
        except NoReverseMatch:
            out.append((label, None))
    return out


def console(request: HttpRequest) -> dict[str, Any]:
    actor = getattr(request, "actor", None)
    if actor is None:
        return {}
    current = getattr(request, "console", None)
    return {
        "actor": actor,
        "console": current,
        "tenant": current.tenant if current is not None else None,
        "my_tenants": actor.tenant_slugs,
        "sign_out_url": sign_out_url(),
        "sections": sections(current.tenant.slug) if current is not None else [],
    }
