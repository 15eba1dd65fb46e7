"""A tenant's secondary indexes: list with create, detail with progress, builds and the
query form, a build queued on request, delete with the name typed as confirmation.

As the exports' pages (``web.views.exports``): members read and query, developers
change; writes go through the API's serializers and ``controlplane.indexes.services``;
another tenant's index is a 404. The query form asks ``services.query`` exactly what
``GET /api/v1/indexes/<name>/query`` asks, so its refusals are the API's messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.core.errors import DomainError
from controlplane.indexes import services
from controlplane.indexes.api.serializers import IndexCreateSerializer
from controlplane.indexes.api.views import IndexViewSet
from controlplane.indexes.models import Index
from spark.jobs.spec import FIELD_TYPES
from web.access import Console, console_of, tenant_page
from web.forms import NON_FIELD, FormState, submit, typed_confirmation
from web.views.exports import field_lines, parse_field_lines
from web.views.topics import check_form_tenant

CREATE_FIELDS = ("name", "topic", "fields", "include_lanes", "description")
QUERY_FIELDS = ("field", "value", "from", "to", "limit", "cursor")
CHANGE = IndexViewSet.write_role
MAX_BUILDS_SHOWN = 20


def tenant_indexes(console: Console) -> QuerySet[Index]:
    return IndexViewSet.queryset.filter(tenant=console.tenant)


def index_in_tenant(console: Console, name: str) -> Index:
    index = tenant_indexes(console).filter(name=name).first() if "\x00" not in name else None
    if index is None:
        raise Http404("no such index")
    return index


@tenant_page(write_role=CHANGE)
def index_list(request: HttpRequest) -> HttpResponse:
    """The list, and (POST) create."""
    console = console_of(request)
    state = FormState(fields=CREATE_FIELDS)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        state, data = index_input(request.POST)
        created = submit(
            IndexCreateSerializer,
            state,
            lambda valid: services.create_index(console.tenant, actor=console.actor, **valid),
            data=data,
        )
        if created is not None:
            return redirect("web:index-detail", tenant=console.tenant.slug, index=created.name)
    rows = [(i, services.progress(i)) for i in tenant_indexes(console).order_by("name")]
    context = {"rows": rows, "form": state, "field_types": ", ".join(FIELD_TYPES)}
    return render(request, "web/indexes/list.html", context, status=422 if state.errors else 200)


@tenant_page(write_role=CHANGE)
def index_detail(request: HttpRequest, index: str) -> HttpResponse:
    """The index, and the query form's answer when it was asked (``?field=&value=``)."""
    row = index_in_tenant(console_of(request), index)
    query_form = FormState.from_post(request.GET, QUERY_FIELDS)
    answer = None
    if "field" in query_form.values:
        answer = _answer(row, query_form)
    return _detail(request, row, query_form=query_form, answer=answer,
                   status=422 if query_form.errors else None)  # fmt: skip


@tenant_page(write_role=CHANGE)
def index_build(request: HttpRequest, index: str) -> HttpResponse:
    console = console_of(request)
    row = index_in_tenant(console, index)
    if request.method != "POST":
        return redirect("web:index-detail", tenant=console.tenant.slug, index=row.name)
    check_form_tenant(console, request.POST)
    try:
        services.request_build(row, actor=console.actor)
    except (services.RunInProgress, services.InvalidRequest) as exc:
        state = FormState(fields=(), errors={NON_FIELD: [exc.message]})
        return _detail(request, row, build_form=state, status=409)
    return redirect("web:index-detail", tenant=console.tenant.slug, index=row.name)


@tenant_page(write_role=CHANGE)
def index_delete(request: HttpRequest, index: str) -> HttpResponse:
    console = console_of(request)
    row = index_in_tenant(console, index)
    if request.method != "POST":
        return redirect("web:index-detail", tenant=console.tenant.slug, index=row.name)
    check_form_tenant(console, request.POST)
    state = typed_confirmation(request.POST, row.name, f"type the index's name, {row.name}")
    if not state.ok:
        return _detail(request, row, delete_form=state)
    services.delete_index(row, actor=console.actor)
    return redirect("web:index-list", tenant=console.tenant.slug)


def index_input(post: Mapping[str, Any]) -> tuple[FormState, dict[str, Any]]:
    state = FormState.from_post(post, CREATE_FIELDS)
    data: dict[str, Any] = {k: v for k, v in state.values.items() if k != "include_lanes"}
    data["fields"] = parse_field_lines(state.values.get("fields", ""))
    data["include_lanes"] = state.values.get("include_lanes") == "true"
    return state, data


def _answer(index: Index, form: FormState) -> dict[str, Any] | None:
    """The query's answer, or None with the refusal on the form."""
    values = form.values
    params = {values["field"]: values.get("value", "")}
    params.update({k: values[k] for k in ("from", "to", "limit", "cursor") if k in values})
    try:
        return services.query(index, params)
    except DomainError as exc:  # a bad query (400) or the brokers (503): said on the form
        form.errors = {NON_FIELD: [exc.message]}
        return None


def _detail(
    request: HttpRequest,
    index: Index,
    *,
    query_form: FormState | None = None,
    answer: dict[str, Any] | None = None,
    build_form: FormState | None = None,
    delete_form: FormState | None = None,
    status: int | None = None,
) -> HttpResponse:
    delete_form = delete_form or FormState(fields=("confirm",))
    context = {
        "index": index,
        "field_lines": field_lines(index.fields),
        "progress": services.progress(index),
        "runs": list(index.builds.order_by("-queued_at", "-pk")[:MAX_BUILDS_SHOWN]),
        "query_form": query_form or FormState(fields=QUERY_FIELDS),
        "answer": answer,
        "build_form": build_form or FormState(fields=()),
        "delete_form": delete_form,
    }
    code = status or (422 if delete_form.errors else 200)
    return render(request, "web/indexes/detail.html", context, status=code)
