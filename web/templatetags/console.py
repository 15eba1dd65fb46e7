"""Template helpers of the console's forms."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import template

from web.views import topics

register = template.Library()


@register.filter
def value_of(form: Any, name: str) -> str:
    """What the user typed in field ``name`` (or its current value), '' if nothing."""
    return str(form.values.get(name, ""))


@register.filter
def errors_of(form: Any, name: str) -> list[str]:
    return list(form.errors.get(name, []))


_DURATION_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60))


@register.filter
def duration_s(seconds: Any) -> str:
    """A whole number of seconds in the largest unit that divides it exactly
    (``604800`` → ``7 days``, ``90`` → ``90 seconds``)."""
    if not isinstance(seconds, int) or seconds <= 0:
        return "—"
    for unit, size in _DURATION_UNITS:
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} second{'' if seconds == 1 else 's'}"


@register.filter
def region_query(topic: Any) -> str:
    """``?region=NAME`` naming a mirror copy on the topic pages; empty for an origin."""
    return topics.region_query(topic)


@register.filter
def ms_time(ms: Any) -> str:
    """Milliseconds since the epoch as a UTC time (``2026-12-07 08:30:00.123 UTC``)."""
    if not isinstance(ms, int) or ms < 0:
        return "—"
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


@register.filter
def bytes_text(value: Any) -> str:
    """A record's key or value as text when it is UTF-8, else its size."""
    if value is None:
        return "—"
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode()
    except UnicodeDecodeError:
        return f"<{len(value)} bytes>"
