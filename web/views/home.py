"""``/console/``: the caller's only tenant's dashboard, or the list of their tenants."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.core.choices import ProvisioningStatus
from controlplane.tenants.models import Tenant
from web.access import signed_in

# A platform administrator's list of every tenant is bounded: beyond it, open a tenant
# by its URL.
ADMIN_TENANT_LIST_LIMIT = 200


@signed_in
def index(request: HttpRequest) -> HttpResponse:
    actor = request.actor  # type: ignore[attr-defined]
    slugs = actor.tenant_slugs
    if len(slugs) == 1 and not actor.platform_admin:
        return redirect("web:dashboard", tenant=slugs[0])
    tenants = Tenant.objects.exclude(status=ProvisioningStatus.DELETING).order_by("slug")
    if not actor.platform_admin:
        tenants = tenants.filter(slug__in=slugs)
    return render(request, "web/index.html", {"tenants": list(tenants[:ADMIN_TENANT_LIST_LIMIT])})
