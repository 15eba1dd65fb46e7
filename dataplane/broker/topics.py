"""Topic names (DESIGN.md decision 9) and partition configuration on the wire.

Client topics are ``<tenant>.<topic>``, lane topics ``<tenant>.<topic>~<lane>``; names
use ``[A-Za-z0-9._~-]`` and are at most ``MAX_TOPIC_LENGTH`` characters. Names starting
with ``__`` are internal: the broker makes them, clients cannot.

``PartitionConfig`` (proto) ↔ ``LogConfig``: an unset proto field keeps the base value.
"""

from __future__ import annotations

import re
from typing import Any

from dataplane._gen.meridian.v1 import common_pb2
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import TimestampType
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import InvalidConfigError

MAX_TOPIC_LENGTH = 200  # leaves room for "-<partition>" and suffixes in a 255-byte file name
MAX_PARTITION = 2**20  # far beyond any real topic; bounds a typo
INTERNAL_PREFIX = "__"

_PART = r"[A-Za-z0-9_-][A-Za-z0-9._-]*"
_CLIENT_TOPIC = re.compile(
    rf"^(?P<tenant>[A-Za-z0-9_-]+)\.(?P<topic>{_PART})(?:~(?P<lane>{_PART}))?$"
)
_CHARS = re.compile(r"^[A-Za-z0-9._~-]+$")

TIMESTAMP_TYPES = {
    "CreateTime": TimestampType.CREATE_TIME,
    "LogAppendTime": TimestampType.LOG_APPEND_TIME,
}
_TIMESTAMP_NAMES = {v: k for k, v in TIMESTAMP_TYPES.items()}

# proto field -> LogConfig field, for the plain integer fields
_INT_FIELDS = {
    "retention_ms": "retention_ms",
    "retention_bytes": "retention_bytes",
    "max_segment_bytes": "max_segment_bytes",
    "segment_ms": "segment_ms",
    "max_message_bytes": "max_batch_bytes",
    "flush_interval_ms": "flush_interval_ms",
    "index_interval_bytes": "index_interval_bytes",
    "local_retention_ms": "local_retention_ms",
    "local_retention_bytes": "local_retention_bytes",
}


def is_internal(topic: str) -> bool:
    return topic.startswith(INTERNAL_PREFIX)


def check_client_topic(topic: str) -> None:
    """Raise ``INVALID_TOPIC`` unless ``topic`` is a name a client may create."""
    if is_internal(topic):
        raise MeridianError(
            ErrorCode.INVALID_TOPIC, f"{topic!r}: names starting with '__' are internal"
        )
    if not topic or len(topic) > MAX_TOPIC_LENGTH:
        raise MeridianError(
            ErrorCode.INVALID_TOPIC, f"topic names have 1 to {MAX_TOPIC_LENGTH} characters"
        )
    if not _CHARS.match(topic):
        raise MeridianError(
            ErrorCode.INVALID_TOPIC, f"{topic!r}: a topic name uses only [A-Za-z0-9._~-]"
        )
    if not _CLIENT_TOPIC.match(topic):
        raise MeridianError(
            ErrorCode.INVALID_TOPIC,
            f"{topic!r} is not <tenant>.<topic> or <tenant>.<topic>~<lane>",
        )


def check_partition(partition: int) -> None:
    if not 0 <= partition < MAX_PARTITION:
        raise MeridianError(
            ErrorCode.INVALID_PARTITIONS, f"partition {partition} is outside [0, {MAX_PARTITION})"
        )


def requested_changes(config: common_pb2.PartitionConfig) -> dict[str, Any]:
    """The ``LogConfig`` fields the set fields of ``config`` ask for; ``INVALID_CONFIG``
    when a value cannot be one."""
    changes: dict[str, Any] = {}
    for proto_name, log_name in _INT_FIELDS.items():
        if config.HasField(proto_name):  # type: ignore[arg-type]
            changes[log_name] = getattr(config, proto_name)
    if config.HasField("durability"):
        try:
            changes["durability"] = Durability(config.durability)
        except ValueError:
            raise _bad_config(
                f"durability {config.durability!r} is not one of {[d.value for d in Durability]}"
            ) from None
    if config.HasField("timestamp_type"):
        if config.timestamp_type not in TIMESTAMP_TYPES:
            raise _bad_config(
                f"timestamp_type {config.timestamp_type!r} is not one of {list(TIMESTAMP_TYPES)}"
            )
        changes["timestamp_type"] = TIMESTAMP_TYPES[config.timestamp_type]
    if config.HasField("remote_storage"):
        changes["remote_storage"] = config.remote_storage
    if config.HasField("topic_id"):
        changes["topic_id"] = config.topic_id
    return changes


def apply_config(base: LogConfig, config: common_pb2.PartitionConfig) -> LogConfig:
    """``base`` with the set fields of ``config``, validated (``INVALID_CONFIG``)."""
    try:
        return base.with_changes(**requested_changes(config))
    except InvalidConfigError as exc:
        raise _bad_config(str(exc)) from exc


def check_alterable(current: LogConfig, wanted: LogConfig) -> None:
    """``INVALID_CONFIG`` for the changes no alter may make: a topic's id is set once (and
    not after its segments were uploaded under none), and a tiered topic stays tiered
    (its remote segments would otherwise be orphaned)."""
    if wanted.topic_id != current.topic_id and (current.topic_id or current.remote_storage):
        raise _bad_config(f"topic_id is {current.topic_id!r} and cannot change")
    if current.remote_storage and not wanted.remote_storage:
        raise _bad_config("remote_storage cannot be turned off once on")


def differs(current: LogConfig, config: common_pb2.PartitionConfig) -> list[str]:
    """The ``LogConfig`` fields ``config`` sets to something other than ``current``'s."""
    return sorted(k for k, v in requested_changes(config).items() if getattr(current, k) != v)


def to_proto(config: LogConfig) -> common_pb2.PartitionConfig:
    """Every field set: the effective configuration."""
    values = {proto: getattr(config, name) for proto, name in _INT_FIELDS.items()}
    return common_pb2.PartitionConfig(
        **values,
        durability=config.durability.value,
        timestamp_type=_TIMESTAMP_NAMES[config.timestamp_type],
        remote_storage=config.remote_storage,
        topic_id=config.topic_id,
    )


def _bad_config(message: str) -> MeridianError:
    return MeridianError(ErrorCode.INVALID_CONFIG, message)
