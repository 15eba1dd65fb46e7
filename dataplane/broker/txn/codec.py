"""The records of ``__transaction_state``: keys and values.

Each record has a key naming what it is about and a value holding its latest state; a
record with a null value (a tombstone) says the key no longer exists. The latest record
of a key wins when the log is replayed. Keys are binary, values JSON (small, and read
only at load)::

    transaction key    0x01 | transactional id (UTF-8; a half message's is
                       "<producer group>\\x1f<half id>")
    transaction value  {"v": 0, "pid", "epoch", "timeout_ms", "state" (TxnState),
                        "partitions": [[topic, partition], ...], "start_ms",
                        "last_update_ms", "half": null | {"group", "id", "key" (base64 or
                        null), "headers": [[name, base64], ...], "interval_ms",
                        "max_checks", "default_commit", "client_id", "checks",
                        "next_check_ms", "resolved_by"}, "prev_pid", "last_epoch"}
                       (``prev_pid`` and ``last_epoch``: KIP-360's previous producer
                       id and last epoch, -1 when absent)
    epoch key          0x00
    epoch value        {"v": 0, "coordinator_epoch": N}: bumped each time the partition
                       is loaded, so markers of an earlier load are told apart
"""

from __future__ import annotations

import base64
import json
from typing import Any

from dataplane.broker.txn.state import HalfInfo, TxnMetadata, TxnState

TXN_KEY = 1
EPOCH_KEY = 0
VALUE_VERSION = 0
HALF_SEPARATOR = "\x1f"  # between a half message's producer group and its id


class CodecError(ValueError):
    """Bytes that are not a record this module wrote."""


def half_transactional_id(group: str, half_id: str) -> str:
    return f"{group}{HALF_SEPARATOR}{half_id}"


def coordinator_key(transactional_id: str) -> str:
    """What places a transactional id on a coordinator: itself, or a half message's
    producer group (so a group's half messages and its producers' check-back streams
    meet on one broker)."""
    return transactional_id.split(HALF_SEPARATOR, 1)[0]


def encode_txn_key(transactional_id: str) -> bytes:
    return bytes((TXN_KEY,)) + transactional_id.encode()


EPOCH_RECORD_KEY = bytes((EPOCH_KEY,))


def decode_key(data: bytes) -> str | None:
    """The transactional id of a transaction key; None for the epoch key."""
    if not data:
        raise CodecError("an empty key")
    if data[0] == EPOCH_KEY and len(data) == 1:
        return None
    if data[0] != TXN_KEY:
        raise CodecError(f"unknown key type {data[0]}")
    try:
        return data[1:].decode()
    except UnicodeDecodeError as exc:
        raise CodecError("a transactional id that is not UTF-8") from exc


def encode_epoch(coordinator_epoch: int) -> bytes:
    return json.dumps({"v": VALUE_VERSION, "coordinator_epoch": coordinator_epoch}).encode()


def decode_epoch(data: bytes) -> int:
    value = _load(data)
    try:
        return int(value["coordinator_epoch"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"bad epoch record: {exc}") from exc


def encode_txn(meta: TxnMetadata) -> bytes:
    value: dict[str, Any] = {
        "v": VALUE_VERSION,
        "pid": meta.producer_id,
        "epoch": meta.producer_epoch,
        "timeout_ms": meta.timeout_ms,
        "state": int(meta.state),
        "partitions": sorted([t, p] for t, p in meta.partitions),
        "start_ms": meta.start_ms,
        "last_update_ms": meta.last_update_ms,
        "half": _encode_half(meta.half) if meta.half is not None else None,
        "prev_pid": meta.previous_producer_id,
        "last_epoch": meta.last_producer_epoch,
    }
    return json.dumps(value, separators=(",", ":")).encode()


def decode_txn(transactional_id: str, data: bytes) -> TxnMetadata:
    value = _load(data)
    try:
        half = value.get("half")
        return TxnMetadata(
            transactional_id=transactional_id,
            producer_id=int(value["pid"]),
            producer_epoch=int(value["epoch"]),
            timeout_ms=int(value["timeout_ms"]),
            state=TxnState(int(value["state"])),
            partitions=frozenset((str(t), int(p)) for t, p in value["partitions"]),
            start_ms=int(value["start_ms"]),
            last_update_ms=int(value["last_update_ms"]),
            half=_decode_half(half) if half is not None else None,
            previous_producer_id=int(value.get("prev_pid", -1)),
            last_producer_epoch=int(value.get("last_epoch", -1)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"bad transaction record for {transactional_id!r}: {exc}") from exc


def _load(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise CodecError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict) or value.get("v") != VALUE_VERSION:
        raise CodecError("an unknown value version")
    return value


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def _encode_half(half: HalfInfo) -> dict[str, Any]:
    return {
        "group": half.group,
        "id": half.half_id,
        "key": _b64(half.key),
        "headers": [[name, _b64(value)] for name, value in half.headers],
        "interval_ms": half.check_interval_ms,
        "max_checks": half.max_checks,
        "default_commit": half.default_commit,
        "client_id": half.client_id,
        "checks": half.checks,
        "next_check_ms": half.next_check_ms,
        "resolved_by": half.resolved_by,
    }


def _decode_half(value: dict[str, Any]) -> HalfInfo:
    return HalfInfo(
        group=str(value["group"]),
        half_id=str(value["id"]),
        key=_unb64(value["key"]),
        headers=tuple((str(name), _unb64(data) or b"") for name, data in value["headers"]),
        check_interval_ms=int(value["interval_ms"]),
        max_checks=int(value["max_checks"]),
        default_commit=bool(value["default_commit"]),
        client_id=str(value["client_id"]),
        checks=int(value["checks"]),
        next_check_ms=int(value["next_check_ms"]),
        resolved_by=str(value["resolved_by"]),
    )
