"""A tenant's service accounts: list, create, change role, rotate the secret, delete
with the name typed as confirmation.

The tenant's members read; its tenant admins change (the REST API's rule,
``ServiceAccountViewSet.write_role``). Writes go through the API's serializers and
``controlplane.accounts.services``. An account is looked up by name within the URL's
tenant only, so another tenant's account is a 404 like a missing one.

A secret exists in one response only: the answer to the create or rotate POST, marked
``Cache-Control: no-store`` so no cache or back button brings it back. No page reads it
again (the control plane keeps only its digest)."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.accounts import services
from controlplane.accounts.api.serializers import (
    ServiceAccountCreateSerializer,
    ServiceAccountUpdateSerializer,
)
from controlplane.accounts.api.views import ServiceAccountViewSet
from controlplane.accounts.filtersets import ServiceAccountFilterSet
from controlplane.accounts.models import ServiceAccount
from controlplane.core.choices import Role
from web.access import Console, console_of, tenant_page
from web.forms import FormState, on_field, submit, typed_confirmation
from web.unavailable import identity_provider_write
from web.views.topics import check_form_tenant

PAGE_SIZE = 50
CREATE_FIELDS = ("name", "role", "description")
ROLE_CHOICES = Role.values
MANAGE = ServiceAccountViewSet.write_role


def tenant_accounts(console: Console) -> QuerySet[ServiceAccount]:
    return ServiceAccountViewSet.queryset.filter(tenant=console.tenant)


def account_in_tenant(console: Console, name: str) -> ServiceAccount:
    account = tenant_accounts(console).filter(name=name).first() if "\x00" not in name else None
    if account is None:
        raise Http404("no such service account")
    return account


@tenant_page(write_role=MANAGE)
@identity_provider_write
def account_list(request: HttpRequest) -> HttpResponse:
    """The list, and (POST) create: the list's URL, so no account name can hide a page
    of its own (any slug is a valid name)."""
    console = console_of(request)
    state = FormState(fields=CREATE_FIELDS)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        state = FormState.from_post(request.POST, CREATE_FIELDS)
        created = submit(
            ServiceAccountCreateSerializer,
            state,
            on_field(
                "name",
                lambda data: services.create_service_account(
                    console.tenant, actor=console.actor, **data
                ),
            ),
        )
        if created is not None:
            account, secret = created
            return _secret_page(request, account, secret, created_now=True)
    name = request.GET.get("name", "")
    filters = ServiceAccountFilterSet(data={"name": name}, queryset=tenant_accounts(console))
    page = Paginator(filters.qs.order_by("name"), PAGE_SIZE).get_page(request.GET.get("page"))
    context = {"page": page, "name_filter": name, "form": state, "role_choices": ROLE_CHOICES}
    return render(request, "web/service_accounts/list.html", context, status=_status(state))


@tenant_page(write_role=MANAGE)
def account_detail(request: HttpRequest, account: str) -> HttpResponse:
    row = account_in_tenant(console_of(request), account)
    return _detail(request, row)


@tenant_page(write_role=MANAGE)
@identity_provider_write
def account_role(request: HttpRequest, account: str) -> HttpResponse:
    console = console_of(request)
    row = account_in_tenant(console, account)
    if request.method != "POST":
        return redirect("web:service-account-detail", tenant=console.tenant.slug, account=row.name)
    check_form_tenant(console, request.POST)
    state = FormState.from_post(request.POST, ("role",))
    updated = submit(
        ServiceAccountUpdateSerializer,
        state,
        lambda data: services.update_service_account(row, actor=console.actor, **data),
        data={"role": request.POST.get("role", "")},  # empty is refused, not "no change"
    )
    if updated is not None:
        return redirect("web:service-account-detail", tenant=console.tenant.slug, account=row.name)
    return _detail(request, row, role_form=state)


@tenant_page(write_role=MANAGE)
@identity_provider_write
def account_rotate(request: HttpRequest, account: str) -> HttpResponse:
    console = console_of(request)
    row = account_in_tenant(console, account)
    if request.method != "POST":
        return redirect("web:service-account-detail", tenant=console.tenant.slug, account=row.name)
    check_form_tenant(console, request.POST)
    secret = services.rotate_service_account_secret(row, actor=console.actor)
    row.refresh_from_db()
    return _secret_page(request, row, secret, created_now=False)


@tenant_page(write_role=MANAGE)
@identity_provider_write
def account_delete(request: HttpRequest, account: str) -> HttpResponse:
    console = console_of(request)
    row = account_in_tenant(console, account)
    if request.method != "POST":
        return redirect("web:service-account-detail", tenant=console.tenant.slug, account=row.name)
    check_form_tenant(console, request.POST)
    refusal = f"type the account's name, {row.name}, to delete it"
    state = typed_confirmation(request.POST, row.name, refusal)
    if state.ok:
        services.delete_service_account(row, actor=console.actor)
        return redirect("web:service-account-list", tenant=console.tenant.slug)
    return _detail(request, row, delete_form=state)


def _detail(
    request: HttpRequest,
    row: ServiceAccount,
    *,
    role_form: FormState | None = None,
    delete_form: FormState | None = None,
) -> HttpResponse:
    """The detail page; a refused form shows what was typed and its errors (422)."""
    role_form = role_form or FormState(fields=("role",), values={"role": row.role})
    delete_form = delete_form or FormState(fields=("confirm",))
    context: dict[str, Any] = {
        "account": row,
        "role_form": role_form,
        "delete_form": delete_form,
        "role_choices": ROLE_CHOICES,
    }
    refused = bool(role_form.errors or delete_form.errors)
    return render(
        request, "web/service_accounts/detail.html", context, status=422 if refused else 200
    )


def _secret_page(
    request: HttpRequest, account: ServiceAccount, secret: str, *, created_now: bool
) -> HttpResponse:
    """The one response that holds the secret: never stored by a cache or the browser."""
    context = {"account": account, "client_secret": secret, "created_now": created_now}
    response = render(
        request, "web/service_accounts/secret.html", context, status=201 if created_now else 200
    )
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    return response


def _status(state: FormState) -> int:
    return 422 if state.errors else 200
