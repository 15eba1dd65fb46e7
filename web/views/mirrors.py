"""A tenant's mirror links: list with health and lag, and create; detail with the lag
chart (per leg, from the metrics history), the lag table per partition, pause/resume,
and delete with the name typed as confirmation.

The tenant's members read; its developers change (the REST API's rule,
``MirrorLinkViewSet.write_role``). Writes go through the API's serializers and
``controlplane.mirrors.services``, so a form refuses what the API refuses with its
messages, named by the API's fields; pages show the API's representation of a link
(its serializer), so the console and ``GET /api/v1/mirrors/{name}`` agree. A link is
looked up by name within the URL's tenant only, so another tenant's link is a 404 like a
missing one.

The form's ``topics`` takes short names separated by commas or spaces."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render

from controlplane.core.errors import Conflict, InvalidRequest
from controlplane.mirrors import services
from controlplane.mirrors.api.serializers import MirrorLinkCreateSerializer, MirrorLinkSerializer
from controlplane.mirrors.api.views import MirrorLinkViewSet
from controlplane.mirrors.choices import Direction, StartPosition
from controlplane.mirrors.models import MirrorLink
from web import charts
from web.access import Console, console_of, tenant_page
from web.forms import NON_FIELD, FormState, submit, typed_confirmation
from web.views.topics import check_form_tenant

CREATE_FIELDS = (
    "name", "source_region", "target_region", "direction", "topics", "topic_pattern",
    "include_lanes", "start_position", "start_timestamp_ms",
)  # fmt: skip
CHANGE = MirrorLinkViewSet.write_role
_SEPARATORS = re.compile(r"[\s,]+")


def tenant_links(console: Console) -> QuerySet[MirrorLink]:
    return MirrorLinkViewSet.queryset.filter(tenant=console.tenant)


def link_in_tenant(console: Console, name: str) -> MirrorLink:
    link = tenant_links(console).filter(name=name).first() if "\x00" not in name else None
    if link is None:
        raise Http404("no such mirror link")
    return link


def shown(link: MirrorLink) -> dict[str, Any]:
    """The API's representation of ``link``."""
    return dict(MirrorLinkSerializer(link).data)


@tenant_page(write_role=CHANGE)
def mirror_list(request: HttpRequest) -> HttpResponse:
    """The list, and (POST) create."""
    console = console_of(request)
    state = FormState(fields=CREATE_FIELDS)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        state, data = link_input(request.POST)
        created = submit(
            MirrorLinkCreateSerializer,
            state,
            lambda valid: services.create_link(console.tenant, actor=console.actor, **valid),
            data=data,
        )
        if created is not None:
            return redirect("web:mirror-detail", tenant=console.tenant.slug, mirror=created.name)
    links = [shown(link) for link in tenant_links(console).order_by("name")]
    context = {"links": links, "form": state, **choices(console)}
    return render(request, "web/mirrors/list.html", context, status=422 if state.errors else 200)


@tenant_page(write_role=CHANGE)
def mirror_detail(request: HttpRequest, mirror: str) -> HttpResponse:
    return _detail(request, link_in_tenant(console_of(request), mirror))


@tenant_page(write_role=CHANGE)
def mirror_pause(request: HttpRequest, mirror: str) -> HttpResponse:
    return _set_paused(request, mirror, paused=True)


@tenant_page(write_role=CHANGE)
def mirror_resume(request: HttpRequest, mirror: str) -> HttpResponse:
    return _set_paused(request, mirror, paused=False)


def _set_paused(request: HttpRequest, mirror: str, *, paused: bool) -> HttpResponse:
    """Pause or resume (POST); a link being deleted is the page's 409."""
    console = console_of(request)
    link = link_in_tenant(console, mirror)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        try:
            services.update_link(link, actor=console.actor, paused=paused)
        except (Conflict, InvalidRequest) as exc:
            state = FormState(fields=(), errors={NON_FIELD: [exc.message]})
            return _detail(request, link, pause_form=state, status=409)
    return redirect("web:mirror-detail", tenant=console.tenant.slug, mirror=link.name)


@tenant_page(write_role=CHANGE)
def mirror_delete(request: HttpRequest, mirror: str) -> HttpResponse:
    console = console_of(request)
    link = link_in_tenant(console, mirror)
    if request.method != "POST":
        return redirect("web:mirror-detail", tenant=console.tenant.slug, mirror=link.name)
    check_form_tenant(console, request.POST)
    state = typed_confirmation(request.POST, link.name, f"type the mirror link's name, {link.name}")
    if not state.ok:
        return _detail(request, link, delete_form=state)
    services.delete_link(link, actor=console.actor)
    return redirect("web:mirror-list", tenant=console.tenant.slug)


@tenant_page()
def mirror_metrics(request: HttpRequest, mirror: str) -> HttpResponse:
    """The lag chart's data (``metrics.json``) for ``charts.js``."""
    console = console_of(request)
    link = link_in_tenant(console, mirror)
    try:
        range_key = charts.range_of(request.GET.get("range"), strict=True)
    except charts.UnknownRangeError as exc:
        return JsonResponse({"code": "invalid_range", "detail": str(exc)}, status=400)
    return JsonResponse(
        charts.json_body(charts.mirror_charts(console, link.name, range_key), range_key)
    )


def link_input(post: Mapping[str, Any]) -> tuple[FormState, dict[str, Any]]:
    """The form as typed, and the API's input it stands for."""
    state = FormState.from_post(post, CREATE_FIELDS)
    data: dict[str, Any] = {k: v for k, v in state.values.items() if k != "include_lanes"}
    topics = [t for t in _SEPARATORS.split(state.values.get("topics", "")) if t]
    if topics or "topic_pattern" not in data:
        data["topics"] = topics
    data["include_lanes"] = state.values.get("include_lanes") == "true"
    return state, data


def choices(console: Console) -> dict[str, Any]:
    """The form's choices: the regions the tenant may use (home first)."""
    tenant = console.tenant
    home = [tenant.home_region.name] if tenant.home_region is not None else []
    others = sorted(r.name for r in tenant.regions.all() if r.pk != tenant.home_region_id)
    return {
        "region_choices": [*home, *others],
        "direction_choices": Direction.values,
        "start_choices": StartPosition.values,
    }


def _detail(
    request: HttpRequest,
    link: MirrorLink,
    *,
    pause_form: FormState | None = None,
    delete_form: FormState | None = None,
    status: int | None = None,
) -> HttpResponse:
    console = console_of(request)
    delete_form = delete_form or FormState(fields=("confirm",))
    range_key = charts.range_of(request.GET.get("range"))
    context = {
        "link": shown(link),
        "range": range_key,
        "ranges": charts.range_links(range_key),
        "charts": charts.mirror_charts(console, link.name, range_key),
        "pause_form": pause_form or FormState(fields=()),
        "delete_form": delete_form,
    }
    code = status or (422 if delete_form.errors else 200)
    return render(request, "web/mirrors/detail.html", context, status=code)
