"""A tenant's audit log, newest first: filter by actor, action, object and time range
with the REST API's filterset, 50 a page, filtered and paged in the database.

The API's rule for who reads it: the tenant's administrators and platform
administrators. A tenant's events are those recorded against its row (as in the API),
so a new tenant with a freed slug does not read the old one's log."""

from __future__ import annotations

from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.core.api.audit import AuditEventFilterSet
from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from web.access import console_of, tenant_page
from web.forms import FormState

PAGE_SIZE = 50
# The API's filters a page offers (``tenant`` is the page's own).
FILTERS = ("actor", "action", "object_type", "object_id", "since", "until")


@tenant_page(read_role=Role.TENANT_ADMIN)
def audit_list(request: HttpRequest) -> HttpResponse:
    console = console_of(request)
    events: QuerySet[AuditEvent] = AuditEvent.objects.filter(tenant=console.tenant)
    form = FormState.from_post(request.GET, FILTERS)
    filters = AuditEventFilterSet(data=form.values, queryset=events)
    if filters.is_valid():
        events = filters.qs
    else:
        form.errors = {
            name: [str(m) for m in messages] for name, messages in filters.errors.items()
        }
        events = events.none()
    page = Paginator(events.order_by("-created_at", "-id"), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    context = {"page": page, "form": form, "query": filters_query(form)}
    return render(request, "web/audit/list.html", context, status=400 if form.errors else 200)


def filters_query(form: FormState) -> str:
    """The filters as a query string, for the pager's links."""
    return urlencode(form.values)
