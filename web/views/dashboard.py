"""A tenant's dashboard: usage against every quota, produce and consume rates of the
busiest topics (``?range=1h`` or ``1d``), the consumer groups with the largest lag (the
groups service's live figures), recent audit events (for those who may read the audit
log, as in the API)."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.core.choices import Role
from controlplane.core.errors import Unavailable
from controlplane.core.models import AuditEvent
from controlplane.groups.services import GroupSummary, list_groups
from controlplane.quotas.models import Quota
from controlplane.quotas.services import LIMIT_FIELDS, USAGE_OF_LIMIT, quota_usage
from controlplane.tenants.models import Tenant
from web import charts
from web.access import console_of, tenant_page

RECENT_AUDIT_EVENTS = 10
LARGEST_LAG_GROUPS = 5
# Quotas measured in bytes (shown with a unit).
BYTE_QUOTAS = {"max_storage_bytes", "produce_bytes_per_s", "fetch_bytes_per_s"}
LABELS = {
    "max_topics": "Topics",
    "max_partitions": "Partitions",
    "max_storage_bytes": "Storage (reserved by retention)",
    "produce_bytes_per_s": "Produce rate",
    "fetch_bytes_per_s": "Fetch rate",
    "requests_per_s": "Requests",
    "max_lanes": "Lanes",
    "max_mirrors": "Mirrors",
    "max_exports": "Exports",
    "max_indexes": "Indexes",
}


@dataclass(frozen=True)
class QuotaLine:
    """One quota: its limit (0 for a rate: unlimited) and, for count and storage
    quotas, the usage held against it."""

    name: str
    label: str
    limit: int
    used: int | None
    in_bytes: bool

    @property
    def is_rate(self) -> bool:
        """A per-second rate, which brokers enforce as it happens (no usage held)."""
        return self.name.endswith("_per_s")

    @property
    def percent(self) -> int | None:
        if self.used is None or self.limit <= 0:
            return None
        return min(100, round(100 * self.used / self.limit))


def quota_lines(quota: Quota, usage: dict[str, int]) -> list[QuotaLine]:
    return [
        QuotaLine(
            name=name,
            label=LABELS[name],
            limit=getattr(quota, name),
            used=usage.get(USAGE_OF_LIMIT[name]) if name in USAGE_OF_LIMIT else None,
            in_bytes=name in BYTE_QUOTAS,
        )
        for name in LIMIT_FIELDS
    ]


def largest_lag(tenant: Tenant) -> list[GroupSummary] | None:
    """The groups most behind (records, then seconds) with any lag; None when the
    brokers did not answer."""
    try:
        groups = list_groups([tenant])
    except Unavailable:
        return None
    lagging = [g for g in groups if g.lag or g.lag_seconds]
    lagging.sort(key=lambda g: (-g.lag, -g.lag_seconds, g.group_id))
    return lagging[:LARGEST_LAG_GROUPS]


@tenant_page()
def dashboard(request: HttpRequest) -> HttpResponse:
    console = console_of(request)
    tenant = console.tenant
    quota = Quota.objects.filter(tenant=tenant).first()
    usage = quota_usage(tenant)
    events = None
    # The API's rule for the audit log: tenant and platform administrators only.
    if console.can(Role.TENANT_ADMIN):
        events = list(
            AuditEvent.objects.filter(tenant=tenant).order_by("-created_at")[:RECENT_AUDIT_EVENTS]
        )
    range_key = charts.range_of(request.GET.get("range"))
    context = {
        "range": range_key,
        "ranges": charts.range_links(range_key),
        "charts": charts.dashboard_charts(console, range_key),
        "lagging": largest_lag(tenant),
        "quota_lines": quota_lines(quota, usage) if quota is not None else [],
        "stored_bytes": usage["stored_bytes"],
        "events": events,
    }
    return render(request, "web/dashboard.html", context)
