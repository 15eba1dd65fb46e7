"""The records of ``__consumer_offsets``: keys and values, in a compact binary encoding.

Each record has a key naming what it is about and a value holding its latest state; a
record with a null value (a tombstone) says the key no longer exists. The latest record
of a key wins when the log is replayed.

Encoding, big-endian: ``str`` is a uint16 byte length and UTF-8; ``bytes`` an int32
length and the bytes. The first byte of a key is its type, the first of a value its
version (0 today; a reader skips versions it does not know)::

    offset key      0x01 | group str | topic str | partition int32
    offset value    0x00 | offset int64 | leader_epoch int32 | commit_timestamp_ms int64
                    | metadata str
    group key       0x02 | group str
    group value     0x00 | protocol_type str | generation int32 | protocol_name str
                    | leader_id str | timestamp_ms int64 | member_count int32 | members
    member          member_id str | group_instance_id str | client_id str
                    | client_host str | session_timeout_ms int32
                    | rebalance_timeout_ms int32 | assignment bytes
    txn offset key  0x03 | producer_id int64 | producer_epoch int16 | group str
                    | topic str | partition int32
    txn offset value  as an offset value
    txn end key     0x04 | producer_id int64
    txn end value   0x00 | producer_epoch int16 | commit int8

A txn offset record is an offset committed inside a transaction (TxnOffsetCommit): it is
pending until a txn end record of its producer (the transaction's marker, written by the
transaction coordinator) applies it (commit) or drops it (abort).

A group value records the group as its last completed rebalance left it (an Empty group
has no members); members' subscriptions are not kept, they are sent again on rejoin.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_KEY = 1
GROUP_KEY = 2
TXN_OFFSET_KEY = 3
TXN_END_KEY = 4
VALUE_VERSION = 0
MAX_STRING_BYTES = 0xFFFF

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OFFSET_VALUE = struct.Struct(">bqiq")
_TXN_KEY = struct.Struct(">qh")
_TXN_END_KEY = struct.Struct(">bq")
_TXN_END_VALUE = struct.Struct(">bhb")


class CodecError(ValueError):
    """Bytes that are not a record this module wrote."""


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed position: the next offset to consume, as the consumer committed it."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """A member as the group metadata record keeps it."""

    member_id: str
    group_instance_id: str = ""
    client_id: str = ""
    client_host: str = ""
    session_timeout_ms: int = 0
    rebalance_timeout_ms: int = 0
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group's generation, protocol, leader and members (see the module docstring)."""

    protocol_type: str
    generation_id: int
    protocol_name: str = ""
    leader_id: str = ""
    timestamp_ms: int = -1
    members: tuple[MemberRecord, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class TxnOffsetKey:
    """An offset commit of a transaction, pending until the transaction ends."""

    producer_id: int
    producer_epoch: int
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class TxnEndKey:
    producer_id: int


@dataclass(frozen=True, slots=True)
class TxnEnd:
    """How a transaction ended, for its pending offset commits."""

    producer_epoch: int
    commit: bool


Key = OffsetKey | GroupKey | TxnOffsetKey | TxnEndKey


# -- writing ---------------------------------------------------------------------------


def _str(value: str) -> bytes:
    data = value.encode()
    if len(data) > MAX_STRING_BYTES:
        raise CodecError(f"string of {len(data)} bytes exceeds {MAX_STRING_BYTES}")
    return _U16.pack(len(data)) + data


def _bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetKey):
        return b"".join(
            (bytes((OFFSET_KEY,)), _str(key.group_id), _str(key.topic), _I32.pack(key.partition))
        )
    if isinstance(key, TxnOffsetKey):
        return b"".join(
            (
                bytes((TXN_OFFSET_KEY,)),
                _TXN_KEY.pack(key.producer_id, key.producer_epoch),
                _str(key.group_id),
                _str(key.topic),
                _I32.pack(key.partition),
            )
        )
    if isinstance(key, TxnEndKey):
        return _TXN_END_KEY.pack(TXN_END_KEY, key.producer_id)
    return bytes((GROUP_KEY,)) + _str(key.group_id)


def encode_txn_end(value: TxnEnd) -> bytes:
    return _TXN_END_VALUE.pack(VALUE_VERSION, value.producer_epoch, int(value.commit))


def encode_offset(value: OffsetAndMetadata) -> bytes:
    head = _OFFSET_VALUE.pack(
        VALUE_VERSION, value.offset, value.leader_epoch, value.commit_timestamp_ms
    )
    return head + _str(value.metadata)


def _encode_member(member: MemberRecord) -> bytes:
    return b"".join(
        (
            _str(member.member_id),
            _str(member.group_instance_id),
            _str(member.client_id),
            _str(member.client_host),
            _I32.pack(member.session_timeout_ms),
            _I32.pack(member.rebalance_timeout_ms),
            _bytes(member.assignment),
        )
    )


def encode_group(value: GroupRecord) -> bytes:
    parts = [
        bytes((VALUE_VERSION,)),
        _str(value.protocol_type),
        _I32.pack(value.generation_id),
        _str(value.protocol_name),
        _str(value.leader_id),
        _I64.pack(value.timestamp_ms),
        _I32.pack(len(value.members)),
    ]
    parts += (_encode_member(member) for member in value.members)
    return b"".join(parts)


# -- reading ---------------------------------------------------------------------------


class _Reader:
    """Reads the fields of one key or value, refusing to run past its end."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise CodecError(f"field of {size} bytes at {self.pos} overruns {len(self.data)}")
        chunk, self.pos = self.data[self.pos : end], end
        return chunk

    def unpack(self, fmt: struct.Struct) -> int:
        return int(fmt.unpack(self.take(fmt.size))[0])

    def text(self) -> str:
        try:
            return self.take(self.unpack(_U16)).decode()
        except UnicodeDecodeError as exc:
            raise CodecError(f"string at {self.pos} is not UTF-8") from exc

    def blob(self) -> bytes:
        return self.take(self.unpack(_I32))

    def done(self) -> None:
        if self.pos != len(self.data):
            raise CodecError(f"{len(self.data) - self.pos} bytes trail the fields")


def decode_key(data: bytes) -> Key:
    """The key of a record; ``CodecError`` for an unknown type or malformed bytes."""
    reader = _Reader(data)
    kind = reader.take(1)[0]
    if kind == OFFSET_KEY:
        key: Key = OffsetKey(reader.text(), reader.text(), reader.unpack(_I32))
    elif kind == GROUP_KEY:
        key = GroupKey(reader.text())
    elif kind == TXN_OFFSET_KEY:
        pid = reader.unpack(_I64)
        epoch = int(struct.unpack(">h", reader.take(2))[0])
        key = TxnOffsetKey(pid, epoch, reader.text(), reader.text(), reader.unpack(_I32))
    elif kind == TXN_END_KEY:
        key = TxnEndKey(reader.unpack(_I64))
    else:
        raise CodecError(f"unknown key type {kind}")
    reader.done()
    return key


def _check_version(reader: _Reader) -> None:
    version = reader.take(1)[0]
    if version != VALUE_VERSION:
        raise CodecError(f"unknown value version {version}")


def decode_txn_end(data: bytes) -> TxnEnd:
    reader = _Reader(data)
    _check_version(reader)
    epoch = int(struct.unpack(">h", reader.take(2))[0])
    commit = reader.take(1)[0]
    reader.done()
    return TxnEnd(epoch, bool(commit))


def decode_offset(data: bytes) -> OffsetAndMetadata:
    reader = _Reader(data)
    _check_version(reader)
    offset = reader.unpack(_I64)
    leader_epoch = reader.unpack(_I32)
    timestamp = reader.unpack(_I64)
    value = OffsetAndMetadata(offset, reader.text(), leader_epoch, timestamp)
    reader.done()
    return value


def _decode_member(reader: _Reader) -> MemberRecord:
    return MemberRecord(
        member_id=reader.text(),
        group_instance_id=reader.text(),
        client_id=reader.text(),
        client_host=reader.text(),
        session_timeout_ms=reader.unpack(_I32),
        rebalance_timeout_ms=reader.unpack(_I32),
        assignment=reader.blob(),
    )


def decode_group(data: bytes) -> GroupRecord:
    reader = _Reader(data)
    _check_version(reader)
    protocol_type = reader.text()
    generation = reader.unpack(_I32)
    protocol_name, leader_id = reader.text(), reader.text()
    timestamp = reader.unpack(_I64)
    count = reader.unpack(_I32)
    if count < 0:
        raise CodecError(f"negative member count {count}")
    members = tuple(_decode_member(reader) for _ in range(count))
    reader.done()
    return GroupRecord(protocol_type, generation, protocol_name, leader_id, timestamp, members)
