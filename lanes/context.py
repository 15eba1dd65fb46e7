"""The lane in effect while a process handles a lane record, so a lane spans services.

The SDK's consumer sets ``current_lane`` while the application processes a record of a
lane (``processing_lane``); the producer reads it. A record's lane is, in order: the
producer call's explicit ``lane=``, the record's own ``x-lane`` header, the producer's
configured lane, the lane in effect (``current_lane``); else it goes to the trunk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar

from lanes.names import check_lane_name, lane_of_headers

current_lane: ContextVar[str | None] = ContextVar("meridian_current_lane", default=None)


@contextlib.contextmanager
def processing_lane(lane: str | None) -> Iterator[None]:
    """Make ``lane`` the lane in effect inside the block (None: the trunk)."""
    token = current_lane.set(lane)
    try:
        yield
    finally:
        current_lane.reset(token)


def lane_for_record(
    *,
    explicit: str | None = None,
    headers: Iterable[tuple[str, bytes | None]] | None = None,
    configured: str | None = None,
) -> str | None:
    """The lane a record goes to (None: the trunk), by the order above."""
    if explicit is not None:
        return check_lane_name(explicit)
    if headers:
        lane = lane_of_headers(headers)
        if lane is not None:
            return lane
    if configured is not None:
        return configured
    return current_lane.get()
