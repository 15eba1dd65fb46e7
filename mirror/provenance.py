"""Provenance headers: where a mirrored record was first written.

On its first hop a record gains ``x-origin-region: <from region>`` and
``x-origin-offset: <source offset, decimal ASCII>``, appended after its own headers. A
record that already carries ``x-origin-region`` keeps both headers as they are (it was
copied before: they name its origin, not the last hop). A record whose origin is the
region being written to is never copied there (it came from there): that rule alone
keeps two-way links from looping, with no renamed topics. The copy loop applies the
rule through the SDK (``Provenance``, compiled); ``origin`` reads the headers back
(the resume scan).
"""

from __future__ import annotations

from collections.abc import Sequence

from dataplane.client import ORIGIN_OFFSET, ORIGIN_REGION

Headers = Sequence[tuple[str, bytes | None]]


def origin(headers: Headers) -> tuple[bytes | None, int | None]:
    """The record's ``x-origin-region`` and ``x-origin-offset`` (None when absent or,
    for the offset, not a decimal number)."""
    region: bytes | None = None
    offset: bytes | None = None
    for key, value in headers:
        if key == ORIGIN_REGION:
            region = value
        elif key == ORIGIN_OFFSET:
            offset = value
    if offset is None or not offset.isdigit():
        return region, None
    return region, int(offset)
