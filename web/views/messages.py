"""The message browser of a topic: its records read through the brokers with the
signed-in user's own token (``web.records``), and a form producing a test record.

Everything a page shows is named by its query string (``partition``, ``mode`` with
``offset`` / ``time`` / ``count``, ``view``, and ``at``, the positions a page starts
from, per partition), so pages are bookmarkable and page forward and back without
JavaScript. A page shows up to ``count`` records: a share of them from each partition
it reads, so the previous page starts ``share`` records back in each.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render

from controlplane.core.choices import Role
from controlplane.topics.models import Topic
from web.access import Console, console_of, tenant_page
from web.auth.session import ACCESS_TOKEN
from web.forms import NON_FIELD, FormState
from web.records import PAGE_MAX_BYTES, PAGE_RECORDS, BrowseError, Reader, produce, share
from web.shown import HEADER_CAP, KEY_CAP, VIEWS, Shown, show, visible
from web.views.topics import check_form_tenant, tenant_topics

MODES = {"newest": "the newest records", "offset": "an offset", "timestamp": "a time"}
DEFAULT_COUNT = 20
PRODUCE_FIELDS = ("key", "value", "headers", "partition")
MAX_HEADERS = 32


class QueryError(ValueError):
    """A query-string value the page cannot use; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Query:
    partition: int | None  # None: all
    mode: str
    offset: int
    time_ms: int | None
    count: int
    view: str
    at: dict[int, int] | None  # a page's start positions, when paging
    region: str | None = None  # a mirror copy's region (None: the origin)

    def url(self, **changes: Any) -> str:
        """This query's string with ``changes`` (``at=None`` drops the positions)."""
        values = {
            "partition": "all" if self.partition is None else str(self.partition),
            "mode": self.mode,
            "count": str(self.count),
            "view": self.view,
        }
        if self.region is not None:
            values["region"] = self.region
        if self.mode == "offset":
            values["offset"] = str(self.offset)
        if self.mode == "timestamp" and self.time_ms is not None:
            values["time"] = _iso(self.time_ms)
        at = changes.pop("at", self.at)
        values.update({k: str(v) for k, v in changes.items()})
        if at:
            values["at"] = ",".join(f"{p}:{o}" for p, o in sorted(at.items()))
        return "?" + urlencode(values)


def parse_query(params: QueryDict, partitions: int) -> Query:
    partition_text = params.get("partition", "all") or "all"
    partition = None if partition_text == "all" else _int(partition_text, "partition")
    if partition is not None and not 0 <= partition < partitions:
        raise QueryError("partition", f"the topic has partitions 0 to {partitions - 1}")
    mode = params.get("mode", "newest")
    if mode not in MODES:
        raise QueryError("mode", f"start from one of: {', '.join(MODES)}")
    count = _int(params.get("count") or str(DEFAULT_COUNT), "count")
    if not 1 <= count <= PAGE_RECORDS:
        raise QueryError("count", f"show 1 to {PAGE_RECORDS} records")
    offset = _int(params.get("offset") or "0", "offset") if mode == "offset" else 0
    if offset < 0:
        raise QueryError("offset", "an offset is 0 or more")
    time_ms = _time(params.get("time", "")) if mode == "timestamp" else None
    view = params.get("view", "auto")
    if view not in VIEWS:
        view = "auto"
    at = _positions(params.get("at"))
    return Query(partition, mode, offset, time_ms, count, view, at, params.get("region") or None)


def _int(text: str, field: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise QueryError(field, "a whole number") from None


# The times a query may name (epoch milliseconds): from the epoch (a negative time would
# read as the brokers' "latest" or "earliest") to where a page can still show it.
TIME_BOUNDS_MS = (0, int(dt.datetime(9999, 1, 1, tzinfo=dt.UTC).timestamp() * 1000))


def _time(text: str) -> int:
    """An ISO 8601 time (UTC unless it names a zone) or epoch milliseconds, from 1970 to
    9999-01-01: a year-10000 time or a 23-digit number is the field's error, not a 500."""
    text = text.strip()
    if not text:
        raise QueryError("time", "a time, e.g. 2026-01-31T12:00:00 (UTC)")
    if text.isdigit():
        ms = int(text)
    else:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise QueryError("time", "a time, e.g. 2026-01-31T12:00:00 (UTC)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        ms = int(when.timestamp() * 1000)
    if not TIME_BOUNDS_MS[0] <= ms <= TIME_BOUNDS_MS[1]:
        raise QueryError("time", "a time from 1970-01-01 to 9999-01-01 (UTC)")
    return ms


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def _positions(text: str | None) -> dict[int, int] | None:
    if not text:
        return None
    positions: dict[int, int] = {}
    try:
        for item in text.split(",")[:10_000]:
            partition, _, offset = item.partition(":")
            positions[int(partition)] = int(offset)
    except ValueError:
        raise QueryError("at", "positions are partition:offset pairs") from None
    return positions


@dataclass(frozen=True)
class Row:
    partition: int
    offset: int
    timestamp: str
    timestamp_ms: int
    key: Shown
    headers: list[tuple[str, Shown]]
    value: Shown


def _row(record: Any, view: str) -> Row:
    return Row(
        partition=record.partition,
        offset=record.offset,
        timestamp=_iso(record.timestamp) + " UTC" if record.timestamp >= 0 else "—",
        timestamp_ms=record.timestamp,
        key=show(record.key, "auto" if view == "json" else view, KEY_CAP),
        headers=[
            (visible(name), show(value, "text" if view == "json" else view, HEADER_CAP))
            for name, value in record.headers
        ],
        value=show(record.value, view),
    )


def _topic(console: Console, full_name: str, region: str | None) -> Topic:
    """The URL's topic within the page's tenant (404 otherwise, like a missing one): the
    origin, or with ``region`` (``?region=``) the mirror copy in that region; with its
    cluster's brokers (this page needs no assignments)."""
    found = (
        tenant_topics(console).prefetch_related("cluster__brokers").named(full_name, region).first()
        if "\x00" not in full_name
        else None
    )
    if found is None:
        raise Http404("no such topic")
    return found


def bootstrap_of(topic: Topic) -> list[str]:
    """The addresses of the topic's cluster's brokers (never shown to a tenant)."""
    return [b.address for b in topic.cluster.brokers.all() if b.port]


def _read(request: HttpRequest, topic: Topic, query: Query) -> dict[str, Any]:
    """The page's rows and paging links, or ``error``: a message fit for the tenant."""
    partitions = list(range(topic.partitions)) if query.partition is None else [query.partition]
    per = share(query.count, len(partitions))
    bootstrap = bootstrap_of(topic)
    if not bootstrap:
        return {"error": "The topic's brokers are not running yet; try again shortly."}
    token = request.session.get(ACCESS_TOKEN, "")
    try:
        with Reader(bootstrap, token, topic.full_name) as reader:
            bounds = reader.bounds(partitions)
            starts = _starts(reader, query, bounds, per)
            page = reader.read(starts, {p: b.end for p, b in bounds.items()}, per)
    except BrowseError as exc:
        return {"error": f"Cannot read this topic: {exc}."}
    back = {p: max(bounds[p].start, o - per) for p, o in starts.items()}
    return {
        "rows": [_row(r, query.view) for r in page.records],
        "notes": page.notes,
        "bounds": sorted(bounds.items()),
        "fetched_bytes": page.fetched_bytes,
        "newer_url": (
            query.url(at=page.next_positions)
            if any(page.next_positions[p] < bounds[p].end for p in partitions)
            else None
        ),
        "older_url": query.url(at=back) if back != starts else None,
        "view_urls": [(v, query.url(view=v, at=starts)) for v in VIEWS],
    }


def _starts(reader: Reader, query: Query, bounds: dict[int, Any], per: int) -> dict[int, int]:
    """Where the page starts in each partition, kept within its log."""
    if query.at is not None:
        wanted = {p: query.at.get(p, bounds[p].start) for p in bounds}
    elif query.mode == "offset":
        wanted = dict.fromkeys(bounds, query.offset)
    elif query.mode == "timestamp":
        assert query.time_ms is not None
        found = reader.offsets_for_time(list(bounds), query.time_ms)
        wanted = {p: (o if o >= 0 else bounds[p].end) for p, o in found.items()}
    else:
        wanted = {p: b.end - per for p, b in bounds.items()}
    return {p: min(max(o, bounds[p].start), bounds[p].end) for p, o in wanted.items()}


def _context(
    request: HttpRequest, topic: Topic, query: Query | None, params: QueryDict
) -> dict[str, Any]:
    return {
        "topic": topic,
        "query": query,
        "params": params,
        "modes": MODES,
        "views": VIEWS,
        "partitions": range(topic.partitions),
        "page_records": PAGE_RECORDS,
        "page_kib": PAGE_MAX_BYTES,
    }


@tenant_page(write_role=Role.DEVELOPER)
def topic_messages(request: HttpRequest, topic: str) -> HttpResponse:
    """GET: a page of records. POST: produce a test record (developers)."""
    console = console_of(request)
    row = _topic(console, topic, request.GET.get("region"))
    if request.method == "POST":
        return _produce(request, row)
    return _browse(request, row, FormState(fields=PRODUCE_FIELDS), status=200)


def _browse(request: HttpRequest, row: Topic, form: FormState, *, status: int) -> HttpResponse:
    params = request.GET
    context: dict[str, Any]
    try:
        query = parse_query(params, row.partitions)
    except QueryError as exc:
        context = _context(request, row, None, params)
        context["query_error"] = {"field": exc.field, "message": str(exc)}
        status = 422 if status == 200 else status
    else:
        context = _context(request, row, query, params)
        context.update(_read(request, row, query))
    context["produce_form"] = form
    context["produced"] = _produced(params)
    return render(request, "web/topics/messages.html", context, status=status)


def _produced(params: QueryDict) -> dict[str, str] | None:
    partition, _, offset = str(params.get("produced", "")).partition(":")
    return {"partition": partition, "offset": offset} if offset.isdigit() else None


def _produce(request: HttpRequest, row: Topic) -> HttpResponse:
    console = console_of(request)
    check_form_tenant(console, request.POST)
    # As typed, not stripped: a test record's spaces are part of it.
    # Browsers send a textarea's line breaks as CRLF: the record gets the LF typed.
    typed = {name: str(request.POST.get(name, "")).replace("\r\n", "\n") for name in PRODUCE_FIELDS}
    form = FormState(fields=PRODUCE_FIELDS, values={k: v for k, v in typed.items() if v})
    try:
        record = _record(form.values, row.partitions)
    except QueryError as exc:
        form.errors = {exc.field: [str(exc)]}
        return _browse(request, row, form, status=422)
    bootstrap = bootstrap_of(row)
    token = request.session.get(ACCESS_TOKEN, "")
    try:
        if not bootstrap:
            raise BrowseError("BROKER_NOT_AVAILABLE", "the topic's brokers are not running yet")
        produced = produce(bootstrap, token, row.full_name, **record)
    except BrowseError as exc:
        form.errors = {NON_FIELD: [f"The record was not produced: {exc}."]}
        return _browse(request, row, form, status=422)
    query = {
        "partition": produced.partition,
        "mode": "offset",
        "offset": produced.offset,
        "produced": f"{produced.partition}:{produced.offset}",
    }
    if row.mirror_of_id is not None and row.cluster is not None:
        query["region"] = row.cluster.region.name
    response = redirect("web:topic-messages", tenant=console.tenant.slug, topic=row.full_name)
    response["Location"] += "?" + urlencode(query)
    return response


def _record(values: dict[str, str], partitions: int) -> dict[str, Any]:
    """The form's record: key (empty: none), value, ``name=value`` header lines and an
    optional partition."""
    headers: list[tuple[str, bytes]] = []
    for number, line in enumerate(values.get("headers", "").splitlines(), 1):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise QueryError("headers", f"line {number}: write a header as name=value")
        headers.append((name.strip(), value.encode()))
    if len(headers) > MAX_HEADERS:
        raise QueryError("headers", f"at most {MAX_HEADERS} headers")
    partition_text = values.get("partition", "").strip()
    partition = None
    if partition_text:
        partition = _int(partition_text, "partition")
        if not 0 <= partition < partitions:
            raise QueryError("partition", f"the topic has partitions 0 to {partitions - 1}")
    key = values.get("key", "")
    return {
        "value": values.get("value", "").encode(),
        "key": key.encode() if key else None,
        "headers": headers,
        "partition": partition,
    }
