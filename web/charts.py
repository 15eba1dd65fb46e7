"""The console's charts: rate and lag history from ``controlplane.metrics.services`` (the
REST API's reads, with its tenant checks), shaped for the page and for the console's
``metrics.json`` endpoints.

A chart is a time axis (epoch seconds) and lines of values (None: not measured). The
page draws it with uPlot (``static/web/charts.js``, reading the chart from a
``<script type="application/json">`` data block, which the CSP allows since it is never
executed) and always shows its figures — latest, mean and peak of each line — in a
table, for readers without JavaScript and for screen readers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.http import Http404
from django.template.defaultfilters import filesizeformat
from django.utils import timezone

from controlplane.core.errors import NotFound
from controlplane.groups.services import tenant_of_group
from controlplane.metrics import services
from web.access import Console

# ?range= value -> (label, span). Each reads the metrics' default step (about 360
# points): 10 s for the hour, 4 min for the day.
RANGES = {"1h": ("last hour", timedelta(hours=1)), "1d": ("last day", timedelta(days=1))}
DEFAULT_RANGE = "1h"
BUSIEST_TOPICS = 5

RECORDS_S, BYTES_S, RECORDS, SECONDS = "records/s", "bytes/s", "records", "s"


class UnknownRangeError(ValueError):
    """A ``range`` that is none of ``RANGES``."""


def range_of(value: str | None, *, strict: bool = False) -> str:
    """The range asked for; a page falls back to the default, the JSON endpoint
    (``strict``) refuses anything else."""
    if value in RANGES:
        return str(value)
    if strict and value is not None:
        raise UnknownRangeError(f"'range' is one of {', '.join(RANGES)}")
    return DEFAULT_RANGE


@dataclass(frozen=True)
class Line:
    label: str
    values: list[float | None]

    @property
    def known(self) -> list[float]:
        return [v for v in self.values if v is not None]

    @property
    def latest(self) -> float | None:
        known = self.known
        return known[-1] if known else None

    @property
    def mean(self) -> float | None:
        known = self.known
        return sum(known) / len(known) if known else None

    @property
    def peak(self) -> float | None:
        return max(self.known, default=None)


@dataclass(frozen=True)
class Figures:
    """One line's figures, formatted in the chart's unit (— when none is known)."""

    label: str
    latest: str
    mean: str
    peak: str


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    unit: str
    range: str
    x: list[int]
    lines: list[Line]
    line_kind: str = "Topic"  # the figures table's first column: what a line is

    @property
    def data_id(self) -> str:
        return f"{self.id}-data"

    @property
    def range_label(self) -> str:
        return RANGES[self.range][0]

    @property
    def has_data(self) -> bool:
        return any(v for line in self.lines for v in line.known)

    @property
    def figures(self) -> list[Figures]:
        return [
            Figures(
                line.label,
                format_value(line.latest, self.unit),
                format_value(line.mean, self.unit),
                format_value(line.peak, self.unit),
            )
            for line in self.lines
        ]

    def payload(self) -> dict[str, Any]:
        """What ``charts.js`` draws (and the JSON endpoint answers)."""
        return {
            "id": self.id,
            "title": self.title,
            "unit": self.unit,
            "range": self.range,
            "x": self.x,
            "series": [{"label": line.label, "values": line.values} for line in self.lines],
        }


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == BYTES_S:
        return f"{filesizeformat(value)}/s"
    if unit == RECORDS:
        return f"{value:,.0f}"
    if unit == SECONDS:
        return f"{value:,.1f} s"
    return f"{value:,.1f}/s" if value < 100 else f"{value:,.0f}/s"


def _window(range_key: str) -> tuple[datetime | None, datetime | None]:
    """The range's ``from`` and ``to``. The hour is the metrics' default range (None,
    None): ``now - 1 h`` taken here would be a moment older than the service's own
    "now" minus an hour, so it would read the 1-minute tier instead of the 10-second one."""
    if range_key == DEFAULT_RANGE:
        return None, None
    now = timezone.now()
    return now - RANGES[range_key][1], now


def _x(points: Sequence[dict[str, Any]]) -> list[int]:
    return [int(p["at"].timestamp()) for p in points]


def _values(points: Sequence[dict[str, Any]], measure: str) -> list[float | None]:
    return [p[measure] for p in points]


def _missing_as_404(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return call()
    except NotFound:
        raise Http404("no such history") from None


def topic_charts(console: Console, full_name: str, range_key: str) -> list[Chart]:
    """Produce (records/s, bytes/s) and consume rate of a topic of the console's tenant
    (the caller looked it up in the tenant: another tenant's is a 404 before this)."""
    since, until = _window(range_key)
    produced = _missing_as_404(
        lambda: services.topic_metrics(console.actor, full_name, since, until, None)
    )
    consumed = _missing_as_404(
        lambda: services.topic_consume_metrics(console.actor, full_name, since, until, None)
    )
    x = _x(produced["points"])
    return [
        Chart("produce-records", "Produce rate (records/s)", RECORDS_S, range_key, x,
              [Line("produced", _values(produced["points"], "records_per_s"))], "Measure"),
        Chart("produce-bytes", "Produce rate (bytes/s)", BYTES_S, range_key, x,
              [Line("produced", _values(produced["points"], "bytes_per_s"))], "Measure"),
        Chart("consume-records", "Consume rate (records/s, all groups)", RECORDS_S, range_key,
              _x(consumed["points"]),
              [Line("consumed", _values(consumed["points"], "records_per_s"))], "Measure"),
    ]  # fmt: skip


def group_charts(console: Console, group: str, range_key: str) -> list[Chart] | None:
    """Lag of a group of the console's tenant, a line per topic: in records, and in
    seconds when brokers reported it. None: the group has no history yet. Another
    tenant's group is a 404."""
    if tenant_of_group(group) != console.tenant.slug:
        raise Http404("no such group")
    since, until = _window(range_key)
    try:
        body = services.group_metrics(console.actor, group, since, until, None)
    except NotFound:
        return None
    topics = body["topics"]
    x = _x(topics[0]["points"]) if topics else []
    charts = [
        Chart("lag-records", "Lag (records)", RECORDS, range_key, x,
              [Line(t["topic"], _values(t["points"], "lag_records")) for t in topics]),
    ]  # fmt: skip
    seconds = [Line(t["topic"], _values(t["points"], "lag_s")) for t in topics]
    if any(line.known for line in seconds):
        charts.append(Chart("lag-seconds", "Lag (seconds)", SECONDS, range_key, x, seconds))
    return charts


def mirror_charts(console: Console, link: str, range_key: str) -> list[Chart] | None:
    """Lag of a mirror link of the console's tenant (the caller looked it up in the
    tenant), a line per leg: records behind (summed over its partitions) and seconds
    behind (its worst partition). None: no history yet."""
    since, until = _window(range_key)
    try:
        body = services.mirror_metrics(console.actor, console.tenant.slug, link, since, until, None)
    except NotFound:
        return None
    legs = body["legs"]
    x = _x(legs[0]["points"]) if legs else []
    names = [f"{leg['from_region']} → {leg['to_region']}" for leg in legs]
    records = [
        Line(n, _values(leg["points"], "lag_records")) for n, leg in zip(names, legs, strict=True)
    ]
    seconds = [Line(n, _values(leg["points"], "lag_s")) for n, leg in zip(names, legs, strict=True)]
    return [
        Chart("mirror-lag-records", "Lag (records)", RECORDS, range_key, x, records, "Direction"),
        Chart("mirror-lag-seconds", "Lag (seconds)", SECONDS, range_key, x, seconds, "Direction"),
    ]


def dashboard_charts(console: Console, range_key: str) -> list[Chart]:
    """Produce and consume rates of the tenant's busiest topics (most records produced
    over the range), a line per topic."""
    since, until = _window(range_key)
    body = services.busiest_topics(
        console.actor, console.tenant.slug, since, until, None, BUSIEST_TOPICS
    )
    topics = body["topics"]
    x = _x(topics[0]["produce"]) if topics else []
    return [
        Chart("busiest-produce", "Produce rate of the busiest topics (records/s)", RECORDS_S,
              range_key, x, [Line(t["topic"], _values(t["produce"], "records_per_s"))
                             for t in topics]),
        Chart("busiest-consume", "Consume rate of the busiest topics (records/s)", RECORDS_S,
              range_key, x, [Line(t["topic"], _values(t["consume"], "records_per_s"))
                             for t in topics]),
    ]  # fmt: skip


def range_links(range_key: str) -> list[tuple[str, str, bool]]:
    """(value, label, current) of each range, for the range switch."""
    return [(key, label, key == range_key) for key, (label, _) in RANGES.items()]


def json_body(charts: list[Chart] | None, range_key: str) -> dict[str, Any]:
    return {"range": range_key, "charts": [c.payload() for c in charts or []]}
