"""Copying records from a fetched batch into a batch being built, with provenance.

A copy of a topic in another cluster (a mirror) writes each record again: the same key,
value, timestamp and headers, with two provenance headers appended on the record's first
hop, and some records left out. ``copy_records`` does that for a whole fetched batch in
one call, with no object per record, into the record block of a batch being built (the
bytes ``builder.encode_record`` writes, offset deltas counting on from the batch's).

The rule, per record at or after ``min_offset`` (the record's origin is the value of
its *last* ``origin_key`` header; a null value counts as none):

- no origin: copied with its headers kept byte for byte and two appended,
  ``origin_key: origin`` and ``offset_key: <its offset, decimal ASCII>``;
- an origin (the record came by a copy itself): left out (counted as dropped), so a
  record travels one hop, from the region it was produced in, and copies never loop.

Records are checked as the decoder checks them (lengths, varints, a header block that
fills the record, UTF-8 header keys); a bad one raises ``ValueError`` naming it. The
compiled function (``meridian_codec.copy_records``, ``native/src/copy.rs``) is
``_copy_records`` compiled: the same bytes, return values and messages; the tests
compare the two.
"""

from __future__ import annotations

from dataplane.records.builder import encode_record
from dataplane.records.varint import read_uvarint, varint

CopyResult = tuple[int, int, int | None, int | None, int, int, int, int]


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(data):
        raise IndexError(pos)
    return read_uvarint(data, pos)


def _nullable(data: bytes, pos: int, n: int, what: str) -> tuple[bytes | None, int]:
    if pos >= len(data):
        raise IndexError(pos)
    if data[pos] == 1:
        return None, pos + 1
    u, pos = _uvarint(data, pos)
    if u & 1:
        raise ValueError(f"record {n} has {what} length {(u >> 1) ^ -1}")
    return data[pos : pos + (u >> 1)], pos + (u >> 1)


def _origin(data: bytes, pos: int, stop: int, key: bytes, n: int) -> tuple[int, bytes | None]:
    """The header count of the block ``data[pos:stop]`` and its last ``key`` header's
    value (None when absent or null); ``ValueError`` when the block is malformed."""
    bad = f"record {n} has bad headers"
    u, pos = _uvarint(data, pos)
    count = (u >> 1) ^ -(u & 1)
    if not 0 <= count <= (stop - pos) // 2:
        raise ValueError(bad)
    found = None
    for _ in range(count):
        u, pos = _uvarint(data, pos)
        if u & 1 or pos + (u >> 1) > stop:
            raise ValueError(bad)
        name = data[pos : pos + (u >> 1)]
        try:
            name.decode()
        except UnicodeDecodeError:
            raise ValueError(bad) from None
        pos += u >> 1
        u, pos = _uvarint(data, pos)
        value = None
        if not u & 1:
            value, pos = data[pos : pos + (u >> 1)], pos + (u >> 1)
        elif u != 1:
            raise ValueError(bad)
        if pos > stop:
            raise ValueError(bad)
        if name == key:
            found = value
    if pos != stop:
        raise ValueError(bad)
    return count, found


def _header(key: bytes, value: bytes) -> bytes:
    return varint(len(key)) + key + varint(len(value)) + value


def _copy_records(
    out: bytearray | None,
    data: bytes,
    pos: int,
    end: int,
    base_offset: int,
    base_timestamp: int,
    min_offset: int,
    offset_delta: int,
    out_base_timestamp: int | None,
    room: int,
    origin_key: bytes,
    origin: bytes,
    offset_key: bytes,
) -> CopyResult:
    """Append the records of ``data[pos:end]`` (a fetched batch's, based at
    ``base_offset`` and ``base_timestamp``) at or after ``min_offset`` to ``out`` as
    records of a batch holding ``offset_delta`` records so far, based at
    ``out_base_timestamp`` (None while empty), by the rule of the module docstring;
    stop before a record that would take ``out`` past ``room`` more bytes (the first
    record of an empty batch always goes in).

    Returns ``(position of the first record not read, records written, base timestamp,
    max timestamp of those written or None, bytes written, records dropped, offset of
    the last record written or -1, key and value bytes written)``. ``out`` grows only
    when no error is raised; ``out`` None: the records are checked and sized, nothing
    is written (the check a caller runs before queuing any copy).
    """
    block, written, copied, dropped, last, payload = bytearray(), 0, 0, 0, -1, 0
    base, highest, delta, n = out_base_timestamp, None, offset_delta, 0
    try:
        while pos < end:
            u, at = _uvarint(data, pos)
            stop = at + (u >> 1)
            if u & 1 or stop > end or stop < at + 6:
                raise ValueError(f"record {n} has a bad length")
            u, at = _uvarint(data, at + 1)  # data[at]: the record attributes
            timestamp = base_timestamp + ((u >> 1) ^ -(u & 1))
            u, at = _uvarint(data, at)
            if u & 1:
                raise ValueError(f"record {n} has a negative offset delta")
            offset = base_offset + (u >> 1)
            if offset < min_offset:
                pos, n = stop, n + 1
                continue
            key, at = _nullable(data, at, n, "key")
            value, at = _nullable(data, at, n, "value")
            if at >= len(data):
                raise IndexError(at)
            if data[at] == 0 and at + 1 != stop:
                raise ValueError(f"record {n}'s fields do not fill its length")
            count, found = _origin(data, at, stop, origin_key, n)
            if found is not None:
                pos, n, dropped = stop, n + 1, dropped + 1
                continue
            _, first = _uvarint(data, at)
            headers = b"".join((varint(count + 2), data[first:stop],
                                _header(origin_key, origin),
                                _header(offset_key, b"%d" % offset)))  # fmt: skip
            start = timestamp if base is None else base
            if not -(2**63) <= timestamp - start < 2**63:
                raise ValueError(f"record {n}: timestamp delta past int64")
            record = encode_record(timestamp - start, delta, key, value, headers)
            if delta > 0 and written + len(record) > room:
                break
            block += record
            written += len(record)
            base, delta, copied, last = start, delta + 1, copied + 1, offset
            highest = timestamp if highest is None else max(highest, timestamp)
            payload += len(key or b"") + len(value or b"")
            pos, n = stop, n + 1
    except IndexError:
        raise ValueError(f"record {n} runs past the end of the batch") from None
    if out is not None:
        out += block
    return pos, copied, base, highest, written, dropped, last, payload


try:  # the compiled copy (native/, built by ./dev); ``_copy_records`` is its reference
    from meridian_codec import copy_records as _compiled_copy
except ImportError:  # pragma: no cover - a build without the compiled codec
    _compiled_copy = None

COMPILED_COPY = _compiled_copy is not None
copy_records = _compiled_copy or _copy_records
