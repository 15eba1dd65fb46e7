"""A tenant's Databus configurations: list with create, detail (the document, its
streams, the agents running it) with edit, delete with the name typed as confirmation.

The tenant's members read; its developers change (the REST API's rule,
``DatabusConfigViewSet.write_role``). Writes go through the API's serializers and
``controlplane.databus.services``, so a form refuses what the API refuses with its
messages; a document's are shown under the document, each named by the field the
schema names (``streams.clicks.linger_ms: must be ...``). A configuration is looked up
by name within the URL's tenant only, so another tenant's is a 404 like a missing one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from controlplane.core.errors import InvalidRequest
from controlplane.databus import services
from controlplane.databus.api.serializers import (
    DatabusConfigCreateSerializer,
    DatabusConfigUpdateSerializer,
)
from controlplane.databus.api.views import DatabusConfigViewSet
from controlplane.databus.models import DatabusAgent, DatabusConfig
from web.access import Console, console_of, tenant_page
from web.forms import FormState, submit, typed_confirmation
from web.views.topics import check_form_tenant

EDIT_FIELDS = ("description", "document")
CREATE_FIELDS = ("name", *EDIT_FIELDS)
CHANGE = DatabusConfigViewSet.write_role
EXAMPLE = {"streams": {"clicks": {"topic": "<tenant>.clicks", "linger_ms": 20}}}


@dataclass(frozen=True)
class AgentRow:
    """An agent of a configuration, as the page shows it."""

    agent: DatabusAgent
    live: bool

    @property
    def up_to_date(self) -> bool:
        latest = getattr(self.agent, "latest_version", None)
        return latest is not None and self.agent.version == latest

    @property
    def spool_records(self) -> int:
        return sum(int(s.get("spool_records", 0)) for s in self.agent.stats.values())

    @property
    def spool_bytes(self) -> int:
        return sum(int(s.get("spool_bytes", 0)) for s in self.agent.stats.values())

    @property
    def spool_age_s(self) -> float:
        return max((float(s.get("spool_age_s", 0)) for s in self.agent.stats.values()), default=0)


def tenant_configs(console: Console) -> QuerySet[DatabusConfig]:
    return DatabusConfigViewSet.queryset.filter(tenant=console.tenant)


def config_in_tenant(console: Console, name: str) -> DatabusConfig:
    config = tenant_configs(console).filter(name=name).first() if "\x00" not in name else None
    if config is None:
        raise Http404("no such Databus configuration")
    return config


@tenant_page(write_role=CHANGE)
def config_list(request: HttpRequest) -> HttpResponse:
    """The list, and (POST) create: the list's URL, so no name can hide a page."""
    console = console_of(request)
    state = FormState(fields=CREATE_FIELDS)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        state, data = config_input(request.POST, CREATE_FIELDS)
        created = (
            None
            if not state.ok
            else submit(
                DatabusConfigCreateSerializer,
                state,
                document_errors_on_field(
                    lambda valid: services.create_databus_config(
                        console.tenant, actor=console.actor, **valid
                    )
                ),
                data=data,
            )
        )
        if created is not None:
            return redirect("web:databus-detail", tenant=console.tenant.slug, config=created.name)
    configs = list(tenant_configs(console).order_by("name"))
    agents = _agents(console, None)
    context = {
        "configs": [(c, [a for a in agents if a.agent.config_name == c.name]) for c in configs],
        "form": state,
        "example": json.dumps(EXAMPLE, indent=2).replace("<tenant>", console.tenant.slug),
    }
    return render(request, "web/databus/list.html", context, status=422 if state.errors else 200)


@tenant_page(write_role=CHANGE)
def config_detail(request: HttpRequest, config: str) -> HttpResponse:
    return _detail(request, config_in_tenant(console_of(request), config))


@tenant_page(write_role=CHANGE)
def config_edit(request: HttpRequest, config: str) -> HttpResponse:
    console = console_of(request)
    row = config_in_tenant(console, config)
    if request.method != "POST":
        return redirect("web:databus-detail", tenant=console.tenant.slug, config=row.name)
    check_form_tenant(console, request.POST)
    state, data = config_input(request.POST, EDIT_FIELDS)
    data.setdefault("description", "")  # an emptied description is a change
    updated = (
        None
        if not state.ok
        else submit(
            DatabusConfigUpdateSerializer,
            state,
            document_errors_on_field(
                lambda valid: services.update_databus_config(row, actor=console.actor, **valid)
            ),
            partial=True,
            data=data,
        )
    )
    if updated is not None:
        return redirect("web:databus-detail", tenant=console.tenant.slug, config=row.name)
    return _detail(request, row, edit_form=state)


@tenant_page(write_role=CHANGE)
def config_delete(request: HttpRequest, config: str) -> HttpResponse:
    console = console_of(request)
    row = config_in_tenant(console, config)
    if request.method != "POST":
        return redirect("web:databus-detail", tenant=console.tenant.slug, config=row.name)
    check_form_tenant(console, request.POST)
    refusal = f"type the configuration's name, {row.name}, to delete it"
    state = typed_confirmation(request.POST, row.name, refusal)
    if not state.ok:
        return _detail(request, row, delete_form=state)
    services.delete_databus_config(row, actor=console.actor)
    return redirect("web:databus-list", tenant=console.tenant.slug)


def config_input(
    post: Mapping[str, Any], fields: tuple[str, ...]
) -> tuple[FormState, dict[str, Any]]:
    """The form as typed, and the API's input it stands for: ``document`` parsed from
    its JSON (text that is not JSON is refused under the field, as the API's parser
    refuses such a body: ``state`` then carries the error)."""
    state = FormState.from_post(post, fields)
    data: dict[str, Any] = dict(state.values)
    if "document" in data:
        try:
            data["document"] = json.loads(data["document"])
        except ValueError as exc:
            state.errors = {"document": [f"not JSON: {exc}"]}
    return state, data


def document_errors_on_field(
    call: Callable[[dict[str, Any]], DatabusConfig],
) -> Callable[[dict[str, Any]], DatabusConfig]:
    """``call``, with the service's document refusal (``{"document": {field:
    [message]}}``) shown under the document as ``field: message``."""

    def wrapped(data: dict[str, Any]) -> DatabusConfig:
        try:
            return call(data)
        except InvalidRequest as exc:
            problems = exc.details.get("document")
            if not isinstance(problems, dict):
                raise
            named = [f"{field}: {m}" for field, messages in problems.items() for m in messages]
            raise InvalidRequest(exc.message, document=named) from exc

    return wrapped


def _detail(
    request: HttpRequest,
    config: DatabusConfig,
    *,
    edit_form: FormState | None = None,
    delete_form: FormState | None = None,
) -> HttpResponse:
    """The detail page; a refused form shows what was typed and its errors (422)."""
    console = console_of(request)
    delete_form = delete_form or FormState(fields=("confirm",))
    current = {"description": config.description, "document": _pretty(config.document)}
    context: dict[str, Any] = {
        "config": config,
        "document": _pretty(config.document),
        "streams": _streams(config),
        "agents": _agents(console, config.name),
        "edit_form": edit_form or FormState(fields=EDIT_FIELDS, values=current),
        "delete_form": delete_form,
    }
    refused = bool((edit_form and edit_form.errors) or delete_form.errors)
    return render(request, "web/databus/detail.html", context, status=422 if refused else 200)


def _pretty(document: Any) -> str:
    return json.dumps(document, indent=2, sort_keys=True)


def _streams(config: DatabusConfig) -> list[dict[str, Any]]:
    resolved = services.resolve_streams(config)
    streams: dict[str, Any] = (config.document or {}).get("streams", {})
    return [
        {"name": name, "resolved": resolved[name], **settings}
        for name, settings in sorted(streams.items())
    ]


def _agents(console: Console, config_name: str | None) -> list[AgentRow]:
    agents = DatabusAgent.objects.filter(tenant=console.tenant)
    if config_name is not None:
        agents = agents.filter(config_name=config_name)
    now = timezone.now()
    ordered = services.with_latest_version(agents).order_by("hostname", "agent_id")
    return [AgentRow(agent, services.is_live(agent, now)) for agent in ordered]
