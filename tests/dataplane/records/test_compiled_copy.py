"""The compiled copy (``meridian_codec.copy_records``) against its reference,
``copying._copy_records``: the same bytes, return values and errors for random records
(keys and values None or not, headers with and without an origin, null origins), chunked
by ``room``, from ``min_offset`` on, and for damaged bytes; and the copies decode to the
records with provenance appended (the rule, checked against a plain oracle)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.records import builder, copying, decode_batch, read_header
from dataplane.records.layout import HEADER_SIZE

pytestmark = pytest.mark.skipif(
    copying._compiled_copy is None, reason="the compiled codec is not built here"
)
FAST = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

RULE = (b"x-origin-region", b"east", b"x-origin-offset")
BYTES = st.none() | st.binary(max_size=20) | st.binary(min_size=128, max_size=200)
ORIGINS = st.sampled_from([b"east", b"west", b"north", None])
HEADER = st.tuples(st.sampled_from(["x-origin-region", "x-origin-offset", "x-lane", "\u00e9"]),
                   st.one_of(ORIGINS, BYTES))  # fmt: skip
RECORD = st.tuples(BYTES, BYTES, st.lists(HEADER, max_size=3),
                   st.integers(min_value=0, max_value=2**41))  # fmt: skip
BASE_OFFSET = 1000


def _batch(records: list[Any]) -> bytes:
    batch = builder.BatchBuilder(base_offset=BASE_OFFSET)
    for key, value, headers, timestamp in records:
        batch.append(value, key=key, timestamp=timestamp, headers=headers)
    return batch.build()


def _run(copy: Any, data: bytes, *args: Any) -> tuple[Any, ...]:
    out = bytearray(b"prefix")
    try:
        result = ("ok", copy(out, data, *args, *RULE), bytes(out))
    except ValueError as error:
        result = ("error", str(error))
    try:  # without out: checked and sized alike, nothing written
        checked = ("ok", copy(None, data, *args, *RULE), b"prefix" + out[6:])
    except ValueError as error:
        checked = ("error", str(error))
    assert checked == result
    return result


def _args(data: bytes, min_offset: int, delta: int, base: int | None, room: int) -> list[Any]:
    h = read_header(data)
    return [HEADER_SIZE, len(data), h.base_offset, h.base_timestamp, min_offset, delta, base,
            room]  # fmt: skip


@FAST
@given(
    st.lists(RECORD, min_size=1, max_size=20),
    st.integers(min_value=0, max_value=25),
    st.integers(min_value=0, max_value=5),
    st.none() | st.integers(min_value=0, max_value=2**41),
    st.integers(min_value=0, max_value=3000),
)
def test_copies_alike(
    records: list[Any], skip: int, delta: int, base: int | None, room: int
) -> None:
    data = _batch(records)
    args = _args(data, BASE_OFFSET + skip, delta, base, room)
    assert _run(copying._copy_records, data, *args) == _run(copying._compiled_copy, data, *args)


@FAST
@given(
    st.lists(RECORD, min_size=1, max_size=8),
    st.lists(
        st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)),
        min_size=1,
        max_size=4,
    ),
    st.integers(min_value=0, max_value=3000),
)
def test_damaged_bytes_fail_alike(records: list[Any], damage: list[Any], room: int) -> None:
    data = bytearray(_batch(records))
    for at, value in damage:
        data[HEADER_SIZE + at % (len(data) - HEADER_SIZE)] = value
    args = _args(bytes(data), 0, 0, None, room)
    assert _run(copying._copy_records, bytes(data), *args) == _run(
        copying._compiled_copy, bytes(data), *args
    )


@FAST
@given(st.lists(RECORD, min_size=1, max_size=20))
def test_copies_follow_the_rule(records: list[Any]) -> None:
    """Decoded, a whole copy holds every record without an origin, with provenance
    appended; records that have one are left out."""
    data = _batch(records)
    out = bytearray()
    result = copying.copy_records(out, data, *_args(data, 0, 0, None, 2**40), *RULE)
    expected = []
    for offset, (key, value, headers, timestamp) in enumerate(records, BASE_OFFSET):
        origin = None
        for name, header_value in headers:
            if name == "x-origin-region":
                origin = header_value
        if origin is not None:
            continue
        pairs = tuple(headers)
        pairs += (("x-origin-region", b"east"), ("x-origin-offset", b"%d" % offset))
        expected.append((key, value, pairs, timestamp))
    assert result[0] == len(data)
    assert result[1] == len(expected)
    assert result[5] == len(records) - len(expected)
    if not expected:
        assert out == b""
        return
    _, copied = decode_batch(builder.encode_batch(out, result[1], result[2], result[3]))
    got = [(r.key, r.value, tuple(tuple(h) for h in r.headers), r.timestamp) for r in copied]
    assert got == [(k, v, tuple(tuple(h) for h in hs), t) for k, v, hs, t in expected]
    assert [r.offset for r in copied] == list(range(len(expected)))
