"""When a scheduled export is due.

A ``cron`` schedule is five fields (minute, hour, day of month, month, day of week; UTC)
of ``*``, ``*/n``, numbers, ranges ``a-b`` (``a-b/n``) and lists ``a,b`` — Celery's own
parser reads each field. An ``interval`` schedule runs every ``interval_minutes``. An
export is due when a scheduled minute has come since its last run was queued (never
run: its first scheduled minute since it was created)."""

from __future__ import annotations

from datetime import datetime, timedelta

from celery.schedules import ParseException, crontab_parser

CRON_FIELDS = ((60, 0), (24, 0), (31, 1), (12, 1), (7, 0))
# A cron schedule is looked for this far back at most: a missed day does not pile up.
LOOKBACK = timedelta(days=1)
MAX_INTERVAL_MINUTES = 7 * 24 * 60


def cron_sets(expression: str) -> list[set[int]]:
    """The allowed values of each of the five fields; ``ValueError`` saying why not."""
    parts = expression.split()
    if len(parts) != 5:
        raise ValueError("five fields: minute hour day-of-month month day-of-week")
    sets = []
    for part, (size, minimum) in zip(parts, CRON_FIELDS, strict=True):
        try:
            sets.append(set(crontab_parser(size, minimum).parse(part)))
        except (ParseException, ValueError) as exc:
            raise ValueError(f"{part!r}: {exc}") from None
    return sets


def cron_matches(sets: list[set[int]], at: datetime) -> bool:
    weekday = (at.weekday() + 1) % 7  # cron: Sunday is 0
    values = (at.minute, at.hour, at.day, at.month, weekday)
    return all(v in s for v, s in zip(values, sets, strict=True))


def cron_due(expression: str, since: datetime, now: datetime) -> bool:
    """Whether a minute ``expression`` names lies in ``(since, now]`` (at most
    ``LOOKBACK`` back)."""
    sets = cron_sets(expression)
    at = max(since, now - LOOKBACK).replace(second=0, microsecond=0) + timedelta(minutes=1)
    while at <= now:
        if cron_matches(sets, at):
            return True
        at += timedelta(minutes=1)
    return False


def interval_due(minutes: int, since: datetime, now: datetime) -> bool:
    return now - since >= timedelta(minutes=minutes)
