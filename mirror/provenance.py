"""Provenance headers: where a mirrored record was first written.

A leg copies only the records produced in its *from* region: those without an
``x-origin-region`` header. Each copy gains ``x-origin-region: <from region>`` and
``x-origin-offset: <source offset, decimal ASCII>``, appended after its own headers. A
record that carries ``x-origin-region`` arrived by mirror (whatever its region) and is
never copied again: so every copy names its leg's from-region and source offset, records
travel one hop, and no topology can loop.

The headers are reserved: a tenant's own ``x-origin-*`` headers make its records look
mirrored. They are untrusted input all the same: ``origin`` reads an offset that is not
a decimal int64 of at most 19 ASCII digits as absent, and never raises.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataplane.client import ORIGIN_OFFSET, ORIGIN_REGION

INT64_MAX = 2**63 - 1

Headers = Sequence[tuple[str, bytes | None]]


def origin(headers: Headers) -> tuple[bytes | None, int | None]:
    """The record's ``x-origin-region`` and ``x-origin-offset`` (None when absent or,
    for the offset, malformed: see ``parse_offset``)."""
    region: bytes | None = None
    offset: bytes | None = None
    for key, value in headers:
        if key == ORIGIN_REGION:
            region = value
        elif key == ORIGIN_OFFSET:
            offset = value
    return region, parse_offset(offset)


def parse_offset(value: object) -> int | None:
    """``value`` as an ``x-origin-offset``: at most 19 ASCII digits within int64, else
    None."""
    if not isinstance(value, bytes) or not 0 < len(value) <= 19 or not value.isdigit():
        return None  # bytes.isdigit() is ASCII-only
    offset = int(value)
    return offset if offset <= INT64_MAX else None
