"""A Databus configuration document: its schema, its defaults and its validation.

One module decides what a valid configuration is, for both sides: the control plane
refuses a document that ``parse_config`` refuses (so a bad one is never stored), and
the agent parses what it is served with the same function (so a document it cannot
understand is never applied: the agent keeps the last one it had).

A document (JSON)::

    {"streams": {"clicks": {"topic": "acme.clicks", "compression": "zstd", ...}, ...}}

Each stream's settings, with their defaults (``STREAM_DEFAULTS``):

``topic``             the topic the stream's records go to (required; a full topic name,
                      ``<tenant>.<name>``, never a lane topic: ``lane`` says that)
``lane``              the lane its records go to (null: the trunk); a write may name its
                      own lane, which wins
``key_field``         for a write without a key whose value is a JSON object: the field
                      (dotted path, ``user.id``) whose value becomes the key (null: none)
``partitioner``       ``murmur2`` (by key; keyless records spread), ``round_robin``
``linger_ms``         how long a record may wait for others to fill a batch (0-60000; 50:
                      longer than a producer's, since batching is the agent's purpose)
``batch_bytes``       the bytes at which a partition's batch is sent (1 KiB-16 MiB)
``compression``       none, gzip, snappy, lz4 or zstd
``acks``              ``all`` or ``1``
``delivery``          ``ack_on_spool`` (a write is acknowledged once it is in the spool, as
                      durably as ``fsync`` says) or ``ack_on_broker`` (once the brokers have
                      it, per ``acks``)
``fsync``             the spool's durability: ``always`` (group commit before the write is
                      acknowledged), ``interval`` (every ``fsync_interval_ms``) or
                      ``never`` (the kernel's writeback); every mode survives a kill of the
                      agent, only ``always`` a power loss
``fsync_interval_ms`` for ``interval`` (1-60000)
``spool_max_bytes``   the bytes the stream's spool may hold before ``when_full`` applies
                      (1 MiB-1 TiB)
``when_full``         ``block`` (the write waits up to ``block_timeout_ms``, then is
                      refused), ``reject`` (refused at once) or ``drop_oldest`` (the oldest
                      unsent records are dropped, and counted, to make room)
``block_timeout_ms``  for ``block`` (0-600000)

Stream names: 1-64 characters, lowercase letters, digits, ``.``, ``_`` and ``-``,
starting with a letter or digit. Unknown keys, wrong types and values out of range are
refused with a ``ConfigError`` naming the field (``streams.clicks.linger_ms``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from lanes.names import InvalidLaneNameError, check_lane_name

STREAM_NAME_RE = re.compile(r"\A[a-z0-9][a-z0-9._-]{0,63}\Z")
STREAM_NAME_RULE = (
    "1-64 characters: lowercase letters, digits, '.', '_' and '-', starting with a letter or digit"
)
TOPIC_NAME_RE = re.compile(r"\A[a-z][a-z0-9-]{1,30}[a-z0-9]\.[A-Za-z0-9][A-Za-z0-9._-]{0,199}\Z")
MAX_STREAMS = 1000
KiB = 1024
MiB = 1024 * KiB

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONERS = ("murmur2", "round_robin")
ACKS = ("all", "1")
DELIVERIES = ("ack_on_spool", "ack_on_broker")
FSYNCS = ("always", "interval", "never")
WHEN_FULL = ("block", "reject", "drop_oldest")


class ConfigError(ValueError):
    """A configuration document that breaks the schema; ``field`` names where."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """One stream's settings (see the module docstring for each)."""

    name: str
    topic: str
    lane: str | None = None
    key_field: str | None = None
    partitioner: str = "murmur2"
    linger_ms: int = 50
    batch_bytes: int = 1 * MiB
    compression: str = "lz4"
    acks: str = "all"
    delivery: str = "ack_on_spool"
    fsync: str = "always"
    fsync_interval_ms: int = 100
    spool_max_bytes: int = 1024 * MiB
    when_full: str = "block"
    block_timeout_ms: int = 5_000

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"}


STREAM_DEFAULTS: dict[str, Any] = StreamConfig(name="-", topic="-").to_json()
del STREAM_DEFAULTS["topic"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "partitioner": PARTITIONERS,
    "compression": COMPRESSIONS,
    "acks": ACKS,
    "delivery": DELIVERIES,
    "fsync": FSYNCS,
    "when_full": WHEN_FULL,
}
_RANGES: dict[str, tuple[int, int]] = {
    "linger_ms": (0, 60_000),
    "batch_bytes": (1 * KiB, 16 * MiB),
    "fsync_interval_ms": (1, 60_000),
    "spool_max_bytes": (1 * MiB, 1024 * 1024 * MiB),
    "block_timeout_ms": (0, 600_000),
}
_KEY_FIELD_RE = re.compile(r"\A[A-Za-z0-9_$-]{1,64}(\.[A-Za-z0-9_$-]{1,64}){0,7}\Z")


@dataclass(frozen=True, slots=True)
class DatabusConfig:
    """A parsed document: its streams by name, and the version the control plane gave."""

    streams: Mapping[str, StreamConfig]
    version: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"streams": {name: s.to_json() for name, s in sorted(self.streams.items())}}

    def topics(self) -> set[str]:
        return {s.topic for s in self.streams.values()}


def parse_config(document: object, *, version: int = 0) -> DatabusConfig:
    """The ``DatabusConfig`` of ``document`` (parsed JSON); ``ConfigError`` if invalid."""
    if not isinstance(document, dict):
        raise ConfigError("(document)", "must be a JSON object")
    _no_unknown(document, {"streams"}, "")
    streams = document.get("streams", {})
    if not isinstance(streams, dict):
        raise ConfigError("streams", "must be an object of stream name to settings")
    if len(streams) > MAX_STREAMS:
        raise ConfigError("streams", f"at most {MAX_STREAMS} streams")
    parsed = {name: parse_stream(name, settings) for name, settings in streams.items()}
    return DatabusConfig(streams=parsed, version=version)


def parse_stream(name: object, settings: object) -> StreamConfig:
    """One stream's ``StreamConfig``; ``ConfigError`` naming the field if invalid."""
    if not isinstance(name, str) or not STREAM_NAME_RE.match(name):
        raise ConfigError(f"streams.{name}", f"invalid stream name: {STREAM_NAME_RULE}")
    where = f"streams.{name}"
    if not isinstance(settings, dict):
        raise ConfigError(where, "must be an object of settings")
    _no_unknown(settings, {"topic", *STREAM_DEFAULTS}, where + ".")
    values = {**STREAM_DEFAULTS, **settings}
    values["acks"] = str(values["acks"]) if values["acks"] in (1, "1") else values["acks"]
    _check_topic(values.get("topic"), where + ".topic")
    for key, choices in _CHOICES.items():
        if values[key] not in choices:
            raise ConfigError(f"{where}.{key}", f"must be one of {', '.join(choices)}")
    for key, (low, high) in _RANGES.items():
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{where}.{key}", f"must be an integer from {low} to {high}")
    _check_lane(values["lane"], where + ".lane")
    key_field = values["key_field"]
    if key_field is not None and (
        not isinstance(key_field, str) or not _KEY_FIELD_RE.match(key_field)
    ):
        raise ConfigError(f"{where}.key_field", "must be null or a dotted field path (user.id)")
    return StreamConfig(name=name, **values)


def _no_unknown(mapping: dict[str, Any], known: set[str], prefix: str) -> None:
    for key in mapping:
        if key not in known:
            raise ConfigError(f"{prefix}{key}", "unknown field")


def _check_topic(topic: object, where: str) -> None:
    if not isinstance(topic, str) or not topic:
        raise ConfigError(where, "required: the full name of a topic (tenant.topic)")
    if "~" in topic:
        raise ConfigError(where, "name the trunk topic; the stream's lane picks its lane topic")
    if not TOPIC_NAME_RE.match(topic):
        raise ConfigError(where, f"not a topic name: {topic!r}")


def _check_lane(lane: object, where: str) -> None:
    if lane is None:
        return
    try:
        check_lane_name(lane)  # type: ignore[arg-type]
    except InvalidLaneNameError as err:
        raise ConfigError(where, str(err)) from None
