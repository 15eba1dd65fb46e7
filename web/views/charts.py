"""The charts' data as JSON (``metrics.json``), for ``static/web/charts.js`` to refresh
what the page drew: the same charts the page embeds, with the page's access rules (any
role in the tenant; another tenant's topic or group is a 404 like a missing one)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from web import charts
from web.access import console_of, tenant_page
from web.views.topics import topic_in_tenant


def _range(request: HttpRequest) -> str | HttpResponse:
    try:
        return charts.range_of(request.GET.get("range"), strict=True)
    except charts.UnknownRangeError as exc:
        return JsonResponse({"code": "invalid_range", "detail": str(exc)}, status=400)


@tenant_page()
def topic_metrics(request: HttpRequest, topic: str) -> HttpResponse:
    console = console_of(request)
    row = topic_in_tenant(console, topic, request.GET.get("region"))
    range_key = _range(request)
    if isinstance(range_key, HttpResponse):
        return range_key
    # A mirror copy has none: rates are recorded per name, on the origin's cluster.
    drawn = (
        None
        if row.mirror_of_id is not None
        else charts.topic_charts(console, row.full_name, range_key)
    )
    return JsonResponse(charts.json_body(drawn, range_key))


@tenant_page()
def group_metrics(request: HttpRequest, group: str) -> HttpResponse:
    """A group with no history yet answers no charts (its page says so)."""
    console = console_of(request)
    range_key = _range(request)
    if isinstance(range_key, HttpResponse):
        return range_key
    body = charts.json_body(charts.group_charts(console, group, range_key), range_key)
    return JsonResponse(body)


@tenant_page()
def dashboard_metrics(request: HttpRequest) -> HttpResponse:
    console = console_of(request)
    range_key = _range(request)
    if isinstance(range_key, HttpResponse):
        return range_key
    return JsonResponse(charts.json_body(charts.dashboard_charts(console, range_key), range_key))
