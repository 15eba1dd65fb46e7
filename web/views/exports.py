"""A tenant's Parquet exports: list with create, detail with progress and runs, a run
queued on request, delete with the name typed as confirmation.

The tenant's members read; its developers change (the REST API's rule,
``ExportViewSet.write_role``). Writes go through the API's serializers and
``controlplane.exports.services``, so a form refuses what the API refuses with its
messages, named by the API's fields. An export is looked up by name within the URL's
tenant only, so another tenant's export is a 404 like a missing one.

The form's ``fields`` take one column per line, ``NAME:PATH:TYPE`` (``user_id:user.id:
long``), and ``partition_by`` the directory columns separated by commas."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.core.errors import Conflict, InvalidRequest
from controlplane.exports import services
from controlplane.exports.api.serializers import ExportCreateSerializer
from controlplane.exports.api.views import ExportViewSet
from controlplane.exports.choices import ScheduleKind, ValueFormat
from controlplane.exports.models import Export
from spark.jobs.spec import FIELD_TYPES
from web.access import Console, console_of, tenant_page
from web.forms import NON_FIELD, FormState, submit, typed_confirmation
from web.views.topics import check_form_tenant

CREATE_FIELDS = (
    "name", "topic", "value_format", "fields", "partition_by", "target_uri", "include_lanes",
    "schedule_kind", "interval_minutes", "cron",
)  # fmt: skip
CHANGE = ExportViewSet.write_role
MAX_RUNS_SHOWN = 20
_SEPARATORS = re.compile(r"[\s,]+")


def tenant_exports(console: Console) -> QuerySet[Export]:
    return ExportViewSet.queryset.filter(tenant=console.tenant)


def export_in_tenant(console: Console, name: str) -> Export:
    export = tenant_exports(console).filter(name=name).first() if "\x00" not in name else None
    if export is None:
        raise Http404("no such export")
    return export


@tenant_page(write_role=CHANGE)
def export_list(request: HttpRequest) -> HttpResponse:
    """The list, and (POST) create."""
    console = console_of(request)
    state = FormState(fields=CREATE_FIELDS)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        state, data = export_input(request.POST)
        created = submit(
            ExportCreateSerializer,
            state,
            lambda valid: services.create_export(console.tenant, actor=console.actor, **valid),
            data=data,
        )
        if created is not None:
            return redirect("web:export-detail", tenant=console.tenant.slug, export=created.name)
    rows = [(e, services.progress(e)) for e in tenant_exports(console).order_by("name")]
    context = {"rows": rows, "form": state, **choices()}
    return render(request, "web/exports/list.html", context, status=422 if state.errors else 200)


@tenant_page(write_role=CHANGE)
def export_detail(request: HttpRequest, export: str) -> HttpResponse:
    return _detail(request, export_in_tenant(console_of(request), export))


@tenant_page(write_role=CHANGE)
def export_run(request: HttpRequest, export: str) -> HttpResponse:
    """Queue a run now (POST); a run already queued or running is the page's 409."""
    console = console_of(request)
    row = export_in_tenant(console, export)
    if request.method != "POST":
        return redirect("web:export-detail", tenant=console.tenant.slug, export=row.name)
    check_form_tenant(console, request.POST)
    try:
        services.request_run(row, actor=console.actor)
    except (Conflict, InvalidRequest) as exc:  # one queued already, continuous, not tiered
        state = FormState(fields=(), errors={NON_FIELD: [exc.message]})
        return _detail(request, row, run_form=state, status=409)
    return redirect("web:export-detail", tenant=console.tenant.slug, export=row.name)


@tenant_page(write_role=CHANGE)
def export_delete(request: HttpRequest, export: str) -> HttpResponse:
    console = console_of(request)
    row = export_in_tenant(console, export)
    if request.method != "POST":
        return redirect("web:export-detail", tenant=console.tenant.slug, export=row.name)
    check_form_tenant(console, request.POST)
    state = typed_confirmation(request.POST, row.name, f"type the export's name, {row.name}")
    if not state.ok:
        return _detail(request, row, delete_form=state)
    services.delete_export(row, actor=console.actor)
    return redirect("web:export-list", tenant=console.tenant.slug)


def export_input(post: Mapping[str, Any]) -> tuple[FormState, dict[str, Any]]:
    """The form as typed, and the API's input it stands for."""
    state = FormState.from_post(post, CREATE_FIELDS)
    data: dict[str, Any] = {k: v for k, v in state.values.items() if k != "include_lanes"}
    data["fields"] = parse_field_lines(state.values.get("fields", ""))
    data["partition_by"] = [p for p in _SEPARATORS.split(state.values.get("partition_by", "")) if p]
    data["include_lanes"] = state.values.get("include_lanes") == "true"
    return state, data


def parse_field_lines(text: str) -> list[Any]:
    """One ``NAME:PATH:TYPE`` per line as ``{name, path, type}``; a malformed line is
    kept as its text, which the API's rule refuses with its message."""
    fields: list[Any] = []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line:
            continue
        parts = [p.strip() for p in line.split(":")]
        fields.append(dict(zip(("name", "path", "type"), parts, strict=True)) if len(parts) == 3
                      else line)  # fmt: skip
    return fields


def field_lines(fields: list[dict[str, str]]) -> str:
    return "\n".join(f"{f['name']}:{f['path']}:{f['type']}" for f in fields)


def choices() -> dict[str, Any]:
    return {
        "value_format_choices": ValueFormat.values,
        "schedule_choices": ScheduleKind.values,
        "field_types": ", ".join(FIELD_TYPES),
    }


def _detail(
    request: HttpRequest,
    export: Export,
    *,
    run_form: FormState | None = None,
    delete_form: FormState | None = None,
    status: int | None = None,
) -> HttpResponse:
    delete_form = delete_form or FormState(fields=("confirm",))
    context = {
        "export": export,
        "field_lines": field_lines(export.fields),
        "progress": services.progress(export),
        "runs": list(export.runs.order_by("-queued_at", "-pk")[:MAX_RUNS_SHOWN]),
        "run_form": run_form or FormState(fields=()),
        "delete_form": delete_form,
    }
    code = status or (422 if delete_form.errors else 200)
    return render(request, "web/exports/detail.html", context, status=code)
