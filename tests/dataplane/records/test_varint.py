"""Varints: one encoding table and one decoding table, against kafka-python's codec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.util import decode_varint, encode_varint

from dataplane.records.varint import (
    VARINT_TABLE_SIZE,
    VARINTS,
    ZIGZAG,
    read_uvarint32,
    read_uvarint64,
    read_varint,
    varint,
)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(INT64)
def test_varint_round_trips_and_matches_kafka_python(value: int) -> None:
    encoded = varint(value)
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert decode_varint(bytearray(encoded), 0) == (value, len(encoded))


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_int32_values_match_kafka_python_bytes(value: int) -> None:
    out = bytearray()
    encode_varint(value, out.append)
    assert varint(value) == bytes(out)


def test_the_encoding_table_holds_every_small_non_negative_number() -> None:
    assert len(VARINTS) == VARINT_TABLE_SIZE
    assert all(
        read_varint(VARINTS[n], 0) == (n, len(VARINTS[n])) for n in range(0, VARINT_TABLE_SIZE, 7)
    )


def test_the_decoding_table_holds_every_one_and_two_byte_value() -> None:
    assert [ZIGZAG[u] for u in range(5)] == [0, -1, 1, -2, 2]
    assert ZIGZAG[(1 << 14) - 1] == -(1 << 13)


def test_a_value_past_64_bits_is_refused() -> None:
    with pytest.raises(ValueError, match="64-bit"):
        varint(2**63)


def test_the_kafka_bounded_readers_refuse_what_java_would_misread() -> None:
    with pytest.raises(ValueError, match="past int32"):
        read_uvarint32(b"\xff\xff\xff\xff\x1f", 0)
    with pytest.raises(ValueError, match="longer than 5"):
        read_uvarint32(b"\x80\x80\x80\x80\x80\x00", 0)
    with pytest.raises(ValueError, match="longer than 10"):
        read_uvarint64(b"\x80" * 10 + b"\x00", 0)
    assert read_uvarint32(b"\xff\xff\xff\xff\x0f", 0) == (2**32 - 1, 5)
