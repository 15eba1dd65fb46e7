"""A tenant's transactions page: its transactional ids (state, producer, and the open
transaction's partitions and age, longest open first) with an abort button for an open
one (a hanging transaction; tenant admins), and its half messages (pending ones with
their check-backs, with commit and roll-back buttons; recently decided ones with who
decided them).

Everything goes through ``controlplane.transactions.services``, so the brokers' answers,
the refusals (``transaction_not_open``) and the audit events are the API's. Names are
looked up within the URL's tenant only: another tenant's is the same 404 as a missing
one."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from controlplane.core.choices import Role
from controlplane.core.errors import Conflict, DomainError, NotFound, Unavailable
from controlplane.transactions import services
from web.access import console_of, tenant_page
from web.views.topics import check_form_tenant

BROKERS_DOWN = "the brokers did not answer just now; nothing was changed, try again"


@tenant_page(write_role=Role.TENANT_ADMIN)
def transaction_list(request: HttpRequest) -> HttpResponse:
    """GET: the page. POST (tenant admin): ``abort`` a transactional id's open
    transaction, or ``commit`` / ``rollback`` a pending half message."""
    console = console_of(request)
    notice, problem = "", ""
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        notice, problem = _act(console.tenant, console.actor, request.POST)
        if not problem:
            url = reverse("web:transaction-list", kwargs={"tenant": console.tenant.slug})
            return redirect(f"{url}?done={notice}")
    try:
        transactions = services.list_transactions([console.tenant])
        halves = services.list_half_messages([console.tenant])
    except Unavailable:
        return render(request, "web/transactions/list.html", {"unavailable": True}, status=503)
    transactions.sort(
        key=lambda t: (t.state != "ongoing", -(t.age_seconds or 0), t.transactional_id)
    )
    context: dict[str, Any] = {
        "transactions": transactions,
        "open_count": sum(1 for t in transactions if t.state == "ongoing"),
        "pending": [h for h in halves if h.state == "ongoing"],
        "decided": [h for h in halves if h.state != "ongoing"],
        "done": request.GET.get("done", ""),
        "problem": problem,
    }
    return render(request, "web/transactions/list.html", context, status=409 if problem else 200)


def _act(tenant: Any, actor: Any, form: Any) -> tuple[str, str]:
    """(what was done, or why it was not)."""
    action = form.get("action", "")
    try:
        if action == "abort":
            services.abort_transaction(tenant, form.get("transactional_id", ""), actor=actor)
            return "aborted", ""
        if action in ("commit", "rollback"):
            group, half_id = form.get("producer_group", ""), form.get("half_id", "")
            services.resolve_half_message(
                tenant, group, half_id, commit=action == "commit", actor=actor
            )
            return "committed" if action == "commit" else "rolled back", ""
    except NotFound:
        raise Http404("no such transaction") from None
    except Conflict as conflict:
        return "", str(conflict)
    except Unavailable:
        return "", BROKERS_DOWN
    except DomainError:  # a broker's refusal: its text may name a broker
        return "", "the brokers refused this; nothing was changed"
    raise Http404("no such action")
