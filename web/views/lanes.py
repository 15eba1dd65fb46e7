"""A tenant's lanes: list with create, detail with edit, delete with the name typed as
confirmation (and ``force`` for a lane with live consumers).

The tenant's members read; its developers change (the REST API's rule,
``LaneViewSet.write_role``). Writes go through the API's serializers and
``controlplane.lanes.services``, so a form refuses what the API refuses with its
messages, named by the API's fields. A lane is looked up by name within the URL's tenant
only, so another tenant's lane is a 404 like a missing one.

The form's ``topics`` field takes trunk topic names separated by commas or spaces (the
tenant prefix may be left out, as in the API); empty means ``all_topics``: every topic
of the tenant, also those created later."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from controlplane.lanes import services
from controlplane.lanes.api.serializers import LaneCreateSerializer, LaneUpdateSerializer
from controlplane.lanes.api.views import LaneViewSet
from controlplane.lanes.choices import OrphanPolicy
from controlplane.lanes.models import Lane
from controlplane.topics.models import Topic
from web.access import Console, console_of, tenant_page
from web.forms import NON_FIELD, FormState, submit, typed_confirmation
from web.templatetags.console import duration_s
from web.views.topics import check_form_tenant

EDIT_FIELDS = ("topics", "consume_trunk", "orphan_policy", "ttl_s", "partitions")
CREATE_FIELDS = ("name", *EDIT_FIELDS)
ORPHAN_POLICY_CHOICES = OrphanPolicy.values
CHANGE = LaneViewSet.write_role
_TOPIC_SEPARATORS = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class LaneRow:
    """A lane and its lane topics (``Topic`` rows with a trunk), by full name."""

    lane: Lane
    lane_topics: list[Topic]

    @property
    def live(self) -> bool:
        return bool(self.lane.live_topics)


def tenant_lanes(console: Console) -> QuerySet[Lane]:
    return LaneViewSet.queryset.filter(tenant=console.tenant)


def lane_in_tenant(console: Console, name: str) -> Lane:
    lane = tenant_lanes(console).filter(name=name).first() if "\x00" not in name else None
    if lane is None:
        raise Http404("no such lane")
    return lane


@tenant_page(write_role=CHANGE)
def lane_list(request: HttpRequest) -> HttpResponse:
    """The list, and (POST) create: the list's URL, so no lane name can hide a page of
    its own (``new`` is a valid lane name)."""
    console = console_of(request)
    state = FormState(fields=CREATE_FIELDS)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        state, data = lane_input(request.POST, CREATE_FIELDS)
        created = submit(
            LaneCreateSerializer,
            state,
            lambda valid: services.create_lane(console.tenant, actor=console.actor, **valid),
            data=data,
        )
        if created is not None:
            return redirect("web:lane-detail", tenant=console.tenant.slug, lane=created.name)
    lanes = list(tenant_lanes(console).order_by("name"))
    context = {"rows": _rows(console, lanes), "form": state, **_choices()}
    return render(request, "web/lanes/list.html", context, status=422 if state.errors else 200)


@tenant_page(write_role=CHANGE)
def lane_detail(request: HttpRequest, lane: str) -> HttpResponse:
    return _detail(request, lane_in_tenant(console_of(request), lane))


@tenant_page(write_role=CHANGE)
def lane_edit(request: HttpRequest, lane: str) -> HttpResponse:
    console = console_of(request)
    row = lane_in_tenant(console, lane)
    if request.method != "POST":
        return redirect("web:lane-detail", tenant=console.tenant.slug, lane=row.name)
    check_form_tenant(console, request.POST)
    state, data = lane_input(request.POST, EDIT_FIELDS, editing=True)
    updated = submit(
        LaneUpdateSerializer,
        state,
        lambda valid: services.update_lane(row, actor=console.actor, **valid),
        partial=True,
        data=data,
    )
    if updated is not None:
        return redirect("web:lane-detail", tenant=console.tenant.slug, lane=row.name)
    return _detail(request, row, edit_form=state)


@tenant_page(write_role=CHANGE)
def lane_delete(request: HttpRequest, lane: str) -> HttpResponse:
    """Delete with the name typed; a lane with live consumers only with ``force``
    ticked (else the service's refusal, 409, and the page offers ``force``)."""
    console = console_of(request)
    row = lane_in_tenant(console, lane)
    if request.method != "POST":
        return redirect("web:lane-detail", tenant=console.tenant.slug, lane=row.name)
    check_form_tenant(console, request.POST)
    refusal = f"type the lane's name, {row.name}, to delete it"
    state = typed_confirmation(request.POST, row.name, refusal)
    force = request.POST.get("force") == "true"
    if force:
        state.values["force"] = "true"
    if not state.ok:
        return _detail(request, row, delete_form=state)
    try:
        services.delete_lane(row, actor=console.actor, force=force)
    except services.LaneInUse as exc:
        state.errors = {NON_FIELD: [exc.message]}
        return _detail(request, row, delete_form=state, status=409)
    return redirect("web:lane-list", tenant=console.tenant.slug)


def lane_input(
    post: Mapping[str, Any], fields: tuple[str, ...], *, editing: bool = False
) -> tuple[FormState, dict[str, Any]]:
    """The form as typed, and the API's input it stands for: ``topics`` as a list with
    ``all_topics`` true when it is empty, ``consume_trunk`` from its checkbox. Editing,
    an empty ``partitions`` is null (each trunk's count) and an empty ``ttl_s`` keeps
    the current TTL; creating, empty fields take the API's defaults."""
    state = FormState.from_post(post, fields)
    data: dict[str, Any] = {k: v for k, v in state.values.items() if k != "consume_trunk"}
    topics = [t for t in _TOPIC_SEPARATORS.split(state.values.get("topics", "")) if t]
    data["topics"] = topics
    data["all_topics"] = not topics
    data["consume_trunk"] = state.values.get("consume_trunk") == "true"
    if editing and "partitions" not in data:
        data["partitions"] = None
    return state, data


def _detail(
    request: HttpRequest,
    lane: Lane,
    *,
    edit_form: FormState | None = None,
    delete_form: FormState | None = None,
    status: int | None = None,
) -> HttpResponse:
    """The detail page; a refused form shows what was typed and its errors (422, or
    ``status``)."""
    console = console_of(request)
    delete_form = delete_form or FormState(fields=("confirm", "force"))
    context: dict[str, Any] = {
        "row": _rows(console, [lane])[0],
        "edit_form": edit_form or FormState(fields=EDIT_FIELDS, values=_current(lane)),
        "delete_form": delete_form,
        # Live now or within the grace the service allows: deleting needs ``force``.
        "needs_force": services.is_live(lane, timezone.now()) or status == 409,
        **_choices(),
    }
    refused = bool((edit_form and edit_form.errors) or delete_form.errors)
    code = status or (422 if refused else 200)
    return render(request, "web/lanes/detail.html", context, status=code)


def _rows(console: Console, lanes: list[Lane]) -> list[LaneRow]:
    """The lanes with their lane topics, in one query for all of them."""
    topics = (
        Topic.objects.origins()
        .filter(
            tenant=console.tenant, trunk__isnull=False, lane_name__in=[lane.name for lane in lanes]
        )
        .select_related("trunk")
        .order_by("full_name")
    )
    by_lane: dict[str, list[Topic]] = defaultdict(list)
    for topic in topics:
        by_lane[topic.lane_name].append(topic)
    return [LaneRow(lane, by_lane[lane.name]) for lane in lanes]


def _current(lane: Lane) -> dict[str, str]:
    """The edit form's values: the lane as it is."""
    values = {
        "topics": ", ".join(sorted(t.full_name for t in lane.topics.all())),
        "consume_trunk": "true" if lane.consume_trunk else "",
        "orphan_policy": lane.orphan_policy,
        "ttl_s": str(lane.ttl_s),
        "partitions": "" if lane.partitions is None else str(lane.partitions),
    }
    return {k: v for k, v in values.items() if v}


def _choices() -> dict[str, Any]:
    default = duration_s(int(settings.LANE_DEFAULT_TTL_S))
    return {
        "orphan_policy_choices": ORPHAN_POLICY_CHOICES,
        "ttl_help": f"Without traffic this long, its lane topics and then the lane are "
        f"deleted; empty: {default}",
    }
