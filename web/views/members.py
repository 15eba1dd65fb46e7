"""A tenant's members: list (username, email, role, status), invite, change role,
remove.

The tenant's members read the list; its tenant admins invite, change roles and remove
(the REST API's rule, ``MemberViewSet.write_role``). Writes go through the API's
serializers and ``controlplane.accounts.services`` (the identity provider first, then
the row, audited). A member is looked up by id within the URL's tenant only, so another
tenant's member is a 404 like a missing one."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.accounts import services
from controlplane.accounts.api.serializers import MemberInviteSerializer, MemberUpdateSerializer
from controlplane.accounts.api.views import MemberViewSet
from controlplane.accounts.filtersets import MemberFilterSet
from controlplane.core.choices import Role
from controlplane.tenants.models import Membership
from web.access import Console, console_of, tenant_page
from web.forms import FormState, on_field, submit
from web.unavailable import identity_provider_write
from web.views.topics import check_form_tenant

PAGE_SIZE = 50
INVITE_FIELDS = ("username", "email", "role")
ROLE_CHOICES = Role.values
MANAGE = MemberViewSet.write_role


def tenant_members(console: Console) -> QuerySet[Membership]:
    return MemberViewSet.queryset.filter(tenant=console.tenant)


def member_in_tenant(console: Console, pk: int) -> Membership:
    member = tenant_members(console).filter(pk=pk).first()
    if member is None:
        raise Http404("no such member")
    return member


@tenant_page(write_role=MANAGE)
def member_list(request: HttpRequest) -> HttpResponse:
    return _list(request)


@tenant_page(read_role=MANAGE, write_role=MANAGE)
@identity_provider_write
def member_invite(request: HttpRequest) -> HttpResponse:
    console = console_of(request)
    if request.method != "POST":
        return redirect("web:member-list", tenant=console.tenant.slug)
    check_form_tenant(console, request.POST)
    state = FormState.from_post(request.POST, INVITE_FIELDS)
    invited = submit(
        MemberInviteSerializer,
        state,
        on_field(
            "username",
            lambda data: services.invite_member(console.tenant, actor=console.actor, **data),
        ),
    )
    if invited is not None:
        return redirect("web:member-list", tenant=console.tenant.slug)
    return _list(request, invite_form=state)


@tenant_page(write_role=MANAGE)
@identity_provider_write
def member_role(request: HttpRequest, member: int) -> HttpResponse:
    console = console_of(request)
    row = member_in_tenant(console, member)
    if request.method != "POST":
        return redirect("web:member-list", tenant=console.tenant.slug)
    check_form_tenant(console, request.POST)
    state = FormState.from_post(request.POST, ("role",))
    changed = submit(
        MemberUpdateSerializer,
        state,
        lambda data: services.change_member_role(row, actor=console.actor, role=data["role"]),
    )
    if changed is not None:
        return redirect("web:member-list", tenant=console.tenant.slug)
    return _list(request, role_form=(row.pk, state))


@tenant_page(write_role=MANAGE)
@identity_provider_write
def member_remove(request: HttpRequest, member: int) -> HttpResponse:
    console = console_of(request)
    row = member_in_tenant(console, member)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        services.remove_member(row, actor=console.actor)
    return redirect("web:member-list", tenant=console.tenant.slug)


def _list(
    request: HttpRequest,
    *,
    invite_form: FormState | None = None,
    role_form: tuple[int, FormState] | None = None,
) -> HttpResponse:
    """The list (``?username=`` contains) with a role form per member and the invite
    form; a refused form shows what was typed and its errors (422)."""
    console = console_of(request)
    username = request.GET.get("username", "")
    filters = MemberFilterSet(data={"username": username}, queryset=tenant_members(console))
    page = Paginator(filters.qs.order_by("username"), PAGE_SIZE).get_page(request.GET.get("page"))
    rows = []
    for member in page:
        form = FormState(fields=("role",), values={"role": member.role})
        if role_form is not None and role_form[0] == member.pk:
            form = role_form[1]
        rows.append((member, form))
    invite_form = invite_form or FormState(fields=INVITE_FIELDS)
    context = {
        "page": page,
        "rows": rows,
        "username_filter": username,
        "invite_form": invite_form,
        "role_choices": ROLE_CHOICES,
    }
    refused = bool(invite_form.errors or (role_form and role_form[1].errors))
    return render(request, "web/members/list.html", context, status=422 if refused else 200)
