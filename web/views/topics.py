"""A tenant's topics: list (filter, sort, pages from the database), detail, create,
change config, add partitions, delete with the name typed as confirmation.

The list's rows are trunk topics; a trunk's lane topics (``<topic>~<lane>``, created by
lanes on first use) are listed under it, and a name filter matching a lane topic shows
it with its trunk. A lane topic's page links its trunk and lane; it has no config or
partitions form (it has its trunk's configuration).

Reads use the REST API's queryset and filterset; writes the API's serializers and
``controlplane.topics.services``. A topic is looked up within the URL's tenant only, so
another tenant's topic is a 404 like a missing one."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db.models import Prefetch, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.core.choices import Role
from controlplane.topics import services
from controlplane.topics.api.serializers import TopicCreateSerializer, TopicUpdateSerializer
from controlplane.topics.api.views import TopicViewSet
from controlplane.topics.choices import Durability
from controlplane.topics.filtersets import TopicFilterSet
from controlplane.topics.models import Topic, TopicQuerySet
from web import charts
from web.access import Console, console_of, tenant_page
from web.forms import FormState, submit, typed_confirmation
from web.partitions import partition_rows, topic_sizes

PAGE_SIZE = 50
# ?sort= value -> (label, ORDER BY): the API's ordering fields, the full name breaking ties.
SORTS = {
    "name": ("name, A to Z", ("full_name",)),
    "-name": ("name, Z to A", ("-full_name",)),
    "partitions": ("fewest partitions", ("partitions", "full_name")),
    "-partitions": ("most partitions", ("-partitions", "full_name")),
    "status": ("status", ("status", "full_name")),
    "-status": ("status, reversed", ("-status", "full_name")),
    "created": ("oldest", ("created_at", "full_name")),
    "-created": ("newest", ("-created_at", "full_name")),
}
CONFIG_FIELDS = (
    "retention_ms",
    "retention_bytes",
    "max_message_bytes",
    "durability",
    "min_insync_replicas",
    "unclean_leader_election",
    "remote_storage",
    "local_retention_ms",
    "local_retention_bytes",
    "max_segment_bytes",
    "segment_ms",
)
CREATE_FIELDS = ("name", "partitions", "replication_factor", "region", *CONFIG_FIELDS)
DURABILITY_CHOICES = Durability.values
BOOL_CHOICES = ["true", "false"]


def tenant_topics(console: Console) -> TopicQuerySet:
    queryset: TopicQuerySet = TopicViewSet.queryset.filter(tenant=console.tenant)
    return queryset


def topic_in_tenant(console: Console, full_name: str, region: str | None = None) -> Topic:
    """The tenant's topic ``full_name``: the origin, or with ``region`` (the pages'
    ``?region=``) the topic of that name in that region (a mirror copy)."""
    topic = (
        tenant_topics(console)
        .prefetch_related("assignments__broker", "assignments__leader")
        .named(full_name, region)
        .first()
        if "\x00" not in full_name
        else None
    )
    if topic is None:
        raise Http404("no such topic")
    return topic


def region_query(topic: Topic) -> str:
    """The query string naming ``topic`` on the topic pages: ``?region=NAME`` for a
    mirror copy (the name alone means the origin), empty for an origin."""
    if topic.mirror_of_id is None or topic.cluster is None:
        return ""
    return "?" + urlencode({"region": topic.cluster.region.name})


def topic_page(console: Console, topic: Topic) -> HttpResponse:
    """A redirect to ``topic``'s page (the copy's, for a mirror copy)."""
    response = redirect("web:topic-detail", tenant=console.tenant.slug, topic=topic.full_name)
    response["Location"] += region_query(topic)
    return response


def check_form_tenant(console: Console, post: Any) -> None:
    """A form naming a tenant must name the page's: any other is a 404, like the API's
    answer for a tenant the caller cannot see."""
    named = post.get("tenant")
    if named is not None and named != console.tenant.slug:
        raise Http404("no such tenant")


@tenant_page()
def topic_list(request: HttpRequest) -> HttpResponse:
    console = console_of(request)
    filters = TopicFilterSet(
        data={"name": request.GET.get("name", "")}, queryset=tenant_topics(console)
    )
    sort = request.GET.get("sort", "name")
    if sort not in SORTS:
        sort = "name"
    queryset = _trunks_of(console, filters.qs).order_by(*SORTS[sort][1])
    page = Paginator(queryset, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "name_filter": request.GET.get("name", ""),
        "sort": sort,
        "sorts": {key: label for key, (label, _) in SORTS.items()},
    }
    return render(request, "web/topics/list.html", context)


def _trunks_of(console: Console, matched: QuerySet[Topic]) -> QuerySet[Topic]:
    """The trunk topics among ``matched`` and the trunks of the lane topics among it,
    each with its lane topics."""
    lanes = Topic.objects.order_by("full_name")
    return (
        tenant_topics(console)
        .filter(trunk__isnull=True)
        .filter(Q(pk__in=matched.values("pk")) | Q(pk__in=matched.values("trunk_id")))
        .prefetch_related(Prefetch("lane_topics", queryset=lanes))
    )


@tenant_page()
def topic_detail(request: HttpRequest, topic: str) -> HttpResponse:
    console = console_of(request)
    row = topic_in_tenant(console, topic, request.GET.get("region"))
    range_key = charts.range_of(request.GET.get("range"))
    partitions = partition_rows(row)
    context = {
        "topic": row,
        **_charts(console, row, range_key),
        "partitions": partitions,
        "sizes": topic_sizes(partitions),
        "config_form": _config_state(row),
        "partitions_form": FormState(fields=("partitions",), values={}),
        "delete_form": FormState(fields=("confirm",)),
        "durability_choices": DURABILITY_CHOICES,
        "bool_choices": BOOL_CHOICES,
    }
    return render(request, "web/topics/detail.html", context)


@tenant_page(read_role=Role.DEVELOPER)
def topic_create(request: HttpRequest) -> HttpResponse:
    console = console_of(request)
    state = FormState(fields=CREATE_FIELDS)
    if request.method == "POST":
        check_form_tenant(console, request.POST)
        state = FormState.from_post(request.POST, CREATE_FIELDS)
        created = submit(
            TopicCreateSerializer,
            state,
            lambda data: services.create_topic(console.tenant, actor=console.actor, **data),
        )
        if created is not None:
            return redirect("web:topic-detail", tenant=console.tenant.slug, topic=created.full_name)
    context = {
        "form": state,
        "durability_choices": DURABILITY_CHOICES,
        "bool_choices": BOOL_CHOICES,
    }
    return render(request, "web/topics/create.html", context, status=_status(state))


@tenant_page()
def topic_config(request: HttpRequest, topic: str) -> HttpResponse:
    return _update(request, topic, CONFIG_FIELDS, "config_form")


@tenant_page()
def topic_partitions(request: HttpRequest, topic: str) -> HttpResponse:
    return _update(request, topic, ("partitions",), "partitions_form")


@tenant_page()
def topic_delete(request: HttpRequest, topic: str) -> HttpResponse:
    console = console_of(request)
    row = topic_in_tenant(console, topic, request.GET.get("region"))
    if request.method != "POST":
        return topic_page(console, row)
    check_form_tenant(console, request.POST)
    refusal = f"type the topic's name, {row.full_name}, to delete it"
    state = typed_confirmation(request.POST, row.full_name, refusal)
    if state.ok:
        services.delete_topic(row, actor=console.actor)
        return redirect("web:topic-list", tenant=console.tenant.slug)
    return _detail_with(request, row, "delete_form", state)


def _update(
    request: HttpRequest, full_name: str, fields: tuple[str, ...], form: str
) -> HttpResponse:
    console = console_of(request)
    row = topic_in_tenant(console, full_name, request.GET.get("region"))
    if request.method != "POST":
        return topic_page(console, row)
    check_form_tenant(console, request.POST)
    state = FormState.from_post(request.POST, fields)
    updated = submit(
        TopicUpdateSerializer,
        state,
        lambda data: services.update_topic(row, actor=console.actor, **data),
        partial=True,
    )
    if updated is not None:
        return topic_page(console, row)
    return _detail_with(request, row, form, state)


def _detail_with(request: HttpRequest, row: Topic, form: str, state: FormState) -> HttpResponse:
    """The detail page with one form showing what was typed and its errors (422)."""
    partitions = partition_rows(row)
    context: dict[str, Any] = {
        "topic": row,
        **_charts(console_of(request), row, charts.DEFAULT_RANGE),
        "partitions": partitions,
        "sizes": topic_sizes(partitions),
        "config_form": _config_state(row),
        "partitions_form": FormState(fields=("partitions",)),
        "delete_form": FormState(fields=("confirm",)),
        "durability_choices": DURABILITY_CHOICES,
        "bool_choices": BOOL_CHOICES,
    }
    context[form] = state
    return render(request, "web/topics/detail.html", context, status=_status(state))


def _charts(console: Console, row: Topic, range_key: str) -> dict[str, Any]:
    """The rate charts of the topic, over ``range_key`` (``?range=``). None for a mirror
    copy: the rates are recorded per topic name, measured on the origin's cluster."""
    return {
        "range": range_key,
        "ranges": charts.range_links(range_key),
        "charts": (
            None
            if row.mirror_of_id is not None
            else charts.topic_charts(console, row.full_name, range_key)
        ),
    }


def _config_state(row: Topic) -> FormState:
    values = {name: _shown(getattr(row, name)) for name in CONFIG_FIELDS}
    return FormState(fields=CONFIG_FIELDS, values=values)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _status(state: FormState) -> int:
    return 422 if state.errors else 200
