"""A tenant's consumer groups: the list (sorted by lag), a group's detail (members,
per partition position and lag), and resetting a stopped group's offsets in two steps —
a preview (the API's dry run: per partition current -> new), then a confirmation that
sends exactly the previewed request again, this time to apply.

Everything goes through ``controlplane.groups.services`` and the REST API's
``ResetOffsetsSerializer``, so the brokers' answers, the refusal while members are
active and the audit event are the API's. A group is looked up within the URL's tenant
only: another tenant's group is the same 404 as a missing one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from rest_framework import serializers

from controlplane.core.errors import DomainError, NotFound, Unavailable
from controlplane.groups import services
from controlplane.groups.api.serializers import ResetOffsetsSerializer
from controlplane.groups.choices import STOPPED_STATES, ResetTarget
from controlplane.topics.models import Topic
from web import charts
from web.access import Console, console_of, tenant_page
from web.forms import NON_FIELD, FormState, submit
from web.views.topics import check_form_tenant

RESET_FIELDS = ("to", "topic", "partitions", "timestamp", "offset")
TARGET_CHOICES = ResetTarget.values
PREVIEW, APPLY = "preview", "apply"
# Broker errors name broker addresses, which no page shows: this is said instead.
BROKERS_DOWN = "the brokers did not answer just now; nothing was changed, try again"


class ResetOffsetsForm(ResetOffsetsSerializer):
    """The API's reset serializer, reading a form: ``partitions`` typed as a list
    (``0, 2, 5``), ``timestamp`` as milliseconds or an ISO 8601 time (UTC unless it
    names an offset). Everything else, and every rule, is the API's."""

    def to_internal_value(self, data: Any) -> Any:
        data = dict(data)
        problems: dict[str, list[str]] = {}
        if "partitions" in data:
            try:
                data["partitions"] = parse_partitions(str(data["partitions"]))
            except ValueError as exc:
                problems["partitions"] = [str(exc)]
        if "timestamp" in data:
            try:
                data["timestamp"] = parse_timestamp(str(data["timestamp"]))
            except ValueError as exc:
                problems["timestamp"] = [str(exc)]
        if problems:
            raise serializers.ValidationError(problems)
        return super().to_internal_value(data)


def parse_partitions(text: str) -> list[int]:
    parts = [part.strip() for part in text.replace(" ", ",").split(",") if part.strip()]
    if not parts or not all(part.isdigit() for part in parts):
        raise ValueError("partition numbers separated by commas, e.g. 0, 2, 5")
    return [int(part) for part in parts]


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, from milliseconds or an ISO 8601 time."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            "milliseconds since the epoch, or a time like 2026-01-31T12:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0, int(moment.timestamp() * 1000))


@dataclass(frozen=True)
class PreviewRow:
    """One partition of a previewed reset; ``moved``: records skipped (positive) or to
    read again (negative); None when the group has no commit there yet."""

    topic: str
    partition: int
    current: int | None
    new: int

    @property
    def moved(self) -> int | None:
        return None if self.current is None else self.new - self.current

    @property
    def reread(self) -> int | None:
        moved = self.moved
        return -moved if moved is not None and moved < 0 else None


def preview_rows(plan: services.ResetPlan) -> list[PreviewRow]:
    return [PreviewRow(m.topic, m.partition, m.current, m.new) for m in plan.moves]


def group_in_tenant(console: Console, group_id: str) -> services.GroupDetail:
    """The URL tenant's group, or 404 — the same for another tenant's and a missing one."""
    if "\x00" in group_id:
        raise Http404("no such group")
    try:
        return services.describe_group(console.tenant, group_id)
    except NotFound:
        raise Http404("no such group") from None


@tenant_page()
def group_list(request: HttpRequest) -> HttpResponse:
    console = console_of(request)
    try:
        groups = services.list_groups([console.tenant])
    except Unavailable:
        return render(request, "web/groups/list.html", {"unavailable": True}, status=503)
    # Most behind first: records, then the oldest unconsumed record's age.
    groups.sort(key=lambda g: (-g.lag, -g.lag_seconds, g.group_id))
    return render(request, "web/groups/list.html", {"groups": groups})


@tenant_page()
def group_page(request: HttpRequest, group: str) -> HttpResponse:
    """GET: the group. POST (developer): reset its offsets, ``step=preview`` (the dry
    run, shown with a form to confirm it) or ``step=apply`` (the same request applied,
    then back to the group)."""
    console = console_of(request)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
    try:
        detail = group_in_tenant(console, group)
    except Unavailable:
        return _unavailable(request, group)
    if request.method != "POST":
        context = {
            "reset_form": FormState(fields=RESET_FIELDS),
            "reset_done": "reset" in request.GET,
        }
        return _detail(request, console, detail, context)
    step = APPLY if request.POST.get("step") == APPLY else PREVIEW
    state = FormState.from_post(request.POST, RESET_FIELDS)
    plan = _reset(console, group, state, dry_run=step == PREVIEW)
    if plan is not None and step == APPLY:
        url = reverse("web:group-detail", kwargs={"tenant": console.tenant.slug, "group": group})
        return redirect(f"{url}?reset=done")
    context = {"reset_form": state, "preview": preview_rows(plan) if plan else None}
    return _detail(request, console, detail, context, status=200 if state.ok else 422)


def _reset(
    console: Console, group: str, state: FormState, *, dry_run: bool
) -> services.ResetPlan | None:
    def call(data: dict[str, Any]) -> services.ResetPlan:
        data["dry_run"] = dry_run
        return services.reset_group_offsets(console.tenant, group, actor=console.actor, **data)

    try:
        return submit(ResetOffsetsForm, state, call)
    except NotFound:
        raise Http404("no such group") from None
    except Unavailable:
        state.errors = {NON_FIELD: [BROKERS_DOWN]}
    except DomainError:  # a broker's refusal: its text may name a broker
        state.errors = {NON_FIELD: ["the brokers refused this reset; nothing was changed"]}
    return None


def _detail(
    request: HttpRequest,
    console: Console,
    detail: services.GroupDetail,
    extra: dict[str, Any],
    status: int = 200,
) -> HttpResponse:
    topics = Topic.objects.origins().filter(tenant=console.tenant).order_by("full_name")
    range_key = charts.range_of(request.GET.get("range"))
    context = {
        "group": detail,
        "range": range_key,
        "ranges": charts.range_links(range_key),
        "charts": charts.group_charts(console, detail.group_id, range_key),
        "stopped": not detail.members and detail.state in STOPPED_STATES,
        "topic_choices": list(topics.values_list("full_name", flat=True)),
        "target_choices": TARGET_CHOICES,
        **extra,
    }
    return render(request, "web/groups/detail.html", context, status=status)


def _unavailable(request: HttpRequest, group: str) -> HttpResponse:
    context = {"group_id": group, "unavailable": True}
    return render(request, "web/groups/detail.html", context, status=503)
