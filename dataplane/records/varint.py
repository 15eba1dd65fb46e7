"""Zigzag LEB128 varints of RecordBatch v2 records, encoded and read through one table each.

Every number inside a record (lengths, deltas, counts) is a signed varint: zigzag-mapped
(``(n << 1) ^ (n >> 63)``: 0, -1, 1, -2 ... become 0, 1, 2, 3 ...), then written 7 bits a
byte, low bits first, the high bit set on every byte but the last (protobuf's
``sint32``/``sint64``). Kafka reads an int32 varint in at most 5 bytes and an int64
varlong in at most 10.

Encoding: ``VARINTS[n]`` holds the bytes of every non-negative ``n`` below
``VARINT_TABLE_SIZE`` (what producers write per record), so the hot paths index a tuple
instead of calling ``varint``. Decoding: ``ZIGZAG[u]`` maps every raw one- and two-byte
value back to its signed one; the decoders read those forms inline and call
``read_uvarint`` (or its Kafka-bounded ``read_uvarint32``/``read_uvarint64``) for longer
ones.

Thread safety: the tables are immutable; the functions are pure.
"""

from __future__ import annotations

from typing import Final


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


VARINT_TABLE_SIZE: Final = 1 << 16
VARINTS: Final = tuple(_uvarint(n << 1) for n in range(VARINT_TABLE_SIZE))
"""``VARINTS[n]``: the zigzag varint of a non-negative ``n`` (lengths, deltas, counts)."""
NULL_VARINT: Final = b"\x01"  # zigzag(-1): a null key or value

ZIGZAG: Final = tuple((u >> 1) ^ -(u & 1) for u in range(1 << 14))
"""Zigzag decoding of every one- and two-byte varint value (index: the raw value)."""

_UINT32_LIMIT: Final = 1 << 32  # a zigzag int32 read raw: values 0 .. 2**32 - 1
UINT64_LIMIT: Final = 1 << 64


def varint(value: int) -> bytes:
    """Zigzag LEB128 of a signed 64-bit ``value``; ``ValueError`` past 64 bits."""
    if 0 <= value < VARINT_TABLE_SIZE:
        return VARINTS[value]
    zigzag = (value << 1) ^ (value >> 63)
    if zigzag >> 64:
        raise ValueError(f"{value} does not fit a signed 64-bit varlong")
    return _uvarint(zigzag)


def read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Zigzag LEB128 at ``pos``: ``(value, position after it)``; at most 10 bytes."""
    raw, pos = read_uvarint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def read_uvarint(data: bytes | memoryview, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Unsigned LEB128 at ``pos``: ``(value, position after it)``; ``ValueError`` past
    ``max_bytes`` bytes, ``IndexError`` past the end of ``data``."""
    result = 0
    for index in range(max_bytes):
        b = data[pos + index]
        result |= (b & 0x7F) << (7 * index)
        if b < 0x80:
            return result, pos + index + 1
    raise ValueError(f"varint longer than {max_bytes} bytes")


def read_uvarint32(data: bytes, pos: int) -> tuple[int, int]:
    """A raw (zigzag) int32 varint at ``pos`` as Kafka's ``readVarint`` takes it: at most
    5 bytes, and no bit beyond the 32nd (which Java would silently drop)."""
    result = 0
    for shift in range(0, 35, 7):
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >= _UINT32_LIMIT:
                raise ValueError(f"a varint {result} past int32")
            return result, pos
    raise ValueError("a varint longer than 5 bytes")


def read_uvarint64(data: bytes, pos: int) -> tuple[int, int]:
    """A raw (zigzag) int64 varlong at ``pos``: at most 10 bytes, at most 64 bits."""
    result = 0
    for shift in range(0, 70, 7):
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >= UINT64_LIMIT:
                raise ValueError(f"a varlong {result} past int64")
            return result, pos
    raise ValueError("a varlong longer than 10 bytes")
