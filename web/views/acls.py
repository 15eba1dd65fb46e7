"""A tenant's topic ACL entries: list (by topic, by principal), grant, revoke.

The tenant's members read; its tenant admins grant and revoke (the REST API's rule,
``TopicAclViewSet.write_role``). Writes go through the API's serializer and
``controlplane.topics.acls``, so the form shows the API's messages. An entry is looked
up within the URL's tenant only, and the grant form's topic too: another tenant's entry
or topic answers exactly like a missing one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from controlplane.core.errors import NotFound
from controlplane.tenants.models import Membership
from controlplane.topics import acls
from controlplane.topics.api.serializers import TopicAclCreateSerializer, TopicAclUpdateSerializer
from controlplane.topics.api.views import TopicAclViewSet
from controlplane.topics.choices import AclOperation
from controlplane.topics.filtersets import TopicAclFilterSet
from controlplane.topics.models import Topic, TopicAcl
from web.access import Console, console_of, tenant_page
from web.forms import NON_FIELD, FormState, submit
from web.views.topics import check_form_tenant

PAGE_SIZE = 50
GRANT_FIELDS = ("topic", "principal", "operations")
MANAGE = TopicAclViewSet.write_role


def tenant_acls(console: Console) -> QuerySet[TopicAcl]:
    return TopicAclViewSet.queryset.filter(topic__tenant=console.tenant)


def acl_in_tenant(console: Console, pk: int) -> TopicAcl:
    acl = tenant_acls(console).filter(pk=pk).first()
    if acl is None:
        raise Http404("no such ACL entry")
    return acl


def topic_of_tenant(console: Console, full_name: str) -> Topic:
    """The grant form's topic, in the page's tenant only: any other is not found, with
    the same message whether it is another tenant's or nobody's."""
    topic = (
        Topic.objects.filter(tenant=console.tenant).named(full_name).first()
        if "\x00" not in full_name
        else None
    )
    if topic is None:
        raise NotFound(f"topic {full_name!r} not found in tenant {console.tenant.slug!r}")
    return topic


@tenant_page(write_role=MANAGE)
def acl_list(request: HttpRequest) -> HttpResponse:
    topic = request.GET.get("topic", "").strip()
    values = {"topic": topic} if topic else {}  # granting on the topic being looked at
    return _list(request, FormState(fields=GRANT_FIELDS, values=values), [])


@tenant_page(read_role=MANAGE, write_role=MANAGE)
def acl_grant(request: HttpRequest) -> HttpResponse:
    console = console_of(request)
    if request.method != "POST":
        return redirect("web:acl-list", tenant=console.tenant.slug)
    check_form_tenant(console, request.POST)
    state = FormState.from_post(request.POST, ("topic", "principal"))
    state.fields = GRANT_FIELDS
    checked = [str(op) for op in request.POST.getlist("operations")]
    data = {**state.values, "operations": checked}

    def grant(valid: dict[str, Any]) -> TopicAcl:
        topic = topic_of_tenant(console, valid["topic"])
        return acls.grant_topic_acl(
            topic, principal=valid["principal"], operations=valid["operations"], actor=console.actor
        )

    try:
        granted = submit(TopicAclCreateSerializer, state, grant, data=data)
    except NotFound as exc:
        state.errors = {"topic": [exc.message]}
        return _list(request, state, checked, status=404)
    if granted is not None:
        return _list_of_topic(console, granted.topic.full_name)
    return _list(request, state, checked, status=422)


@tenant_page(write_role=MANAGE)
def acl_operations(request: HttpRequest, acl: int) -> HttpResponse:
    """Replace an entry's operations in place: revoking and granting again would leave
    the topic without the entry in between (with no entry left, open to every role)."""
    console = console_of(request)
    row = acl_in_tenant(console, acl)
    if request.method != "POST":
        return redirect("web:acl-list", tenant=console.tenant.slug)
    check_form_tenant(console, request.POST)
    checked = [str(op) for op in request.POST.getlist("operations")]
    state = FormState(fields=("operations",))
    changed = submit(
        TopicAclUpdateSerializer,
        state,
        lambda data: acls.update_topic_acl(row, operations=data["operations"], actor=console.actor),
        data={"operations": checked},
    )
    if changed is not None:
        return _list_of_topic(console, row.topic.full_name)
    change = Change(pk=row.pk, checked=checked, errors=[*state.non_field, *_all(state)])
    return _list(request, FormState(fields=GRANT_FIELDS), [], change=change, status=422)


@tenant_page(write_role=MANAGE)
def acl_revoke(request: HttpRequest, acl: int) -> HttpResponse:
    console = console_of(request)
    row = acl_in_tenant(console, acl)
    if request.method != "POST":
        return redirect("web:acl-list", tenant=console.tenant.slug)
    check_form_tenant(console, request.POST)
    topic = row.topic.full_name
    acls.revoke_topic_acl(row, actor=console.actor)
    return _list_of_topic(console, topic)


@dataclass(frozen=True)
class Change:
    """A refused change of one entry's operations: what was ticked, and why."""

    pk: int
    checked: list[str]
    errors: list[str]


@dataclass(frozen=True)
class Row:
    acl: TopicAcl
    username: str | None  # the principal's, when it is a member's subject
    checked: list[str]
    errors: list[str]


def _all(state: FormState) -> list[str]:
    return [m for name, messages in state.errors.items() if name != NON_FIELD for m in messages]


def _list(
    request: HttpRequest,
    grant_form: FormState,
    checked: list[str],
    *,
    change: Change | None = None,
    status: int = 200,
) -> HttpResponse:
    """The list, filtered by ``?topic=`` and ``?principal=`` (exact, as in the API),
    with the grant form (as typed when refused)."""
    console = console_of(request)
    topic = request.GET.get("topic", "")
    principal = request.GET.get("principal", "")
    filters = TopicAclFilterSet(
        data={"topic": topic, "principal": principal}, queryset=tenant_acls(console)
    )
    ordered = filters.qs.order_by("topic__full_name", "principal")
    page = Paginator(ordered, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "rows": _rows(console, list(page), change),
        "topic_filter": topic,
        "principal_filter": principal,
        "form": grant_form,
        "operations": AclOperation.values,
        "checked": checked,
    }
    return render(request, "web/acls/list.html", context, status=status)


def _rows(console: Console, entries: list[TopicAcl], change: Change | None) -> list[Row]:
    """Each entry with the username of its principal when that is a member's subject
    (a subject is an opaque id, the username is what a person recognises) and its
    operations form: as ticked and refused, or its current operations."""
    subjects = [acl.principal for acl in entries]
    members = Membership.objects.filter(tenant=console.tenant, subject__in=subjects)
    names = dict(members.values_list("subject", "username"))
    rows = []
    for acl in entries:
        refused = change if change is not None and change.pk == acl.pk else None
        checked = refused.checked if refused else list(acl.operations)
        errors = refused.errors if refused else []
        rows.append(Row(acl, names.get(acl.principal), checked, errors))
    return rows


def _list_of_topic(console: Console, full_name: str) -> HttpResponse:
    url = reverse("web:acl-list", kwargs={"tenant": console.tenant.slug})
    return redirect(f"{url}?{urlencode({'topic': full_name})}")
