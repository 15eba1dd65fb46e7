"""The rules for a topic's name and configuration that do not need the database:
DESIGN decision 9 for names, ``settings.TOPIC_LIMITS`` for bounds. Each function raises
``InvalidRequest`` whose ``details`` map the offending field to its messages."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from controlplane.core.errors import InvalidRequest
from controlplane.gateway.admin import CONFIG_FIELDS as CONFIG_FIELDS
from controlplane.topics.choices import Durability
from controlplane.topics.models import (
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_MS,
    LOCAL_RETENTION_TOTAL,
    MAX_SEGMENT_BYTES,
    MAX_SEGMENT_MS,
    MIN_SEGMENT_BYTES,
    MIN_SEGMENT_MS,
    TOPIC_NAME_RE,
    full_name_problem,
)

LANE_SEPARATOR = "~"  # <tenant>.<topic>~<lane> names a lane topic
INTERNAL_PREFIX = "__"  # internal topics; never a tenant's
MIN_MESSAGE_BYTES = 1024
MAX_MESSAGE_BYTES = 64 * 2**20


def full_name(tenant_slug: str, name: str) -> str:
    """The topic's name on the brokers: ``<tenant>.<topic>``."""
    return f"{tenant_slug}.{name}"


def validate_name(name: str, tenant_slug: str) -> None:
    """A tenant may name a topic with letters, digits, ``.``, ``_`` and ``-``; ``~`` is
    reserved for lane topics and a leading ``__`` for internal ones; with the tenant's
    prefix the name must fit the brokers' limit (``Topic.clean`` holds the same rule)."""
    if LANE_SEPARATOR in name:
        _refuse("name", f"'{LANE_SEPARATOR}' is reserved for lane topics")
    if name.startswith(INTERNAL_PREFIX):
        _refuse("name", f"names starting with '{INTERNAL_PREFIX}' are reserved for internal topics")
    if not re.fullmatch(TOPIC_NAME_RE, name):
        _refuse(
            "name",
            "1-200 characters: letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    problem = full_name_problem(tenant_slug, name)
    if problem is not None:
        _refuse("name", problem)


def validate_partitions(partitions: int, *, current: int | None = None) -> None:
    """At least one partition, at most ``max_partitions_per_topic``; an existing topic's
    partitions may only grow, because records are keyed to partitions by count."""
    limit = settings.TOPIC_LIMITS["max_partitions_per_topic"]
    if not 1 <= partitions <= limit:
        _refuse("partitions", f"must be between 1 and {limit}")
    if current is not None and partitions < current:
        _refuse(
            "partitions",
            f"partitions can only grow: the topic has {current}, {partitions} asked "
            "(shrinking would move keys to other partitions and lose records)",
        )


def resolve_config(
    changes: Mapping[str, Any], base: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The topic configuration after ``changes``: unset fields keep ``base``'s value
    (a new topic's defaults come from ``TOPIC_LIMITS``); every value is checked."""
    limits = settings.TOPIC_LIMITS
    config = dict(base) if base is not None else _defaults(limits)
    config.update({k: v for k, v in changes.items() if k in CONFIG_FIELDS and v is not None})
    _check_range(
        "retention_ms",
        config["retention_ms"],
        limits["min_retention_ms"],
        limits["max_retention_ms"],
    )
    _check_range(
        "retention_bytes",
        config["retention_bytes"],
        limits["min_retention_bytes"],
        limits["max_retention_bytes"],
    )
    _check_range(
        "max_message_bytes", config["max_message_bytes"], MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES
    )
    _check_range(
        "max_segment_bytes", config["max_segment_bytes"], MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES
    )
    _check_range("segment_ms", config["segment_ms"], MIN_SEGMENT_MS, MAX_SEGMENT_MS)
    if config["durability"] not in Durability.values:
        _refuse("durability", f"one of {', '.join(Durability.values)}")
    if not isinstance(config["remote_storage"], bool):
        _refuse("remote_storage", "true or false")
    return config


REPLICATION_FIELDS = ("min_insync_replicas", "unclean_leader_election")


def resolve_replication(
    replication_factor: int,
    changes: Mapping[str, Any],
    base: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The replication settings after ``changes`` for a topic of ``replication_factor``
    replicas: ``min_insync_replicas`` (default: 2, or 1 with one replica) between 1 and
    the replication factor, ``unclean_leader_election`` (default False)."""
    settings_ = (
        dict(base)
        if base is not None
        else {
            "min_insync_replicas": min(2, replication_factor),
            "unclean_leader_election": False,
        }
    )
    settings_.update(
        {k: v for k, v in changes.items() if k in REPLICATION_FIELDS and v is not None}
    )
    _check_range("min_insync_replicas", settings_["min_insync_replicas"], 1, replication_factor)
    if not isinstance(settings_["unclean_leader_election"], bool):
        _refuse("unclean_leader_election", "true or false")
    return settings_


def validate_replication_factor(replication_factor: int, available: int) -> None:
    """At least 1, at most the brokers the cluster has to hold replicas."""
    if available < 1:
        available = 1
    _check_range("replication_factor", replication_factor, 1, available)


def _defaults(limits: Mapping[str, int]) -> dict[str, Any]:
    return {
        "retention_ms": limits["default_retention_ms"],
        "retention_bytes": limits["default_retention_bytes"],
        "max_message_bytes": 1_048_576,
        "durability": str(Durability.INTERVAL),
        "remote_storage": False,
        "local_retention_ms": LOCAL_RETENTION_TOTAL,
        "local_retention_bytes": LOCAL_RETENTION_TOTAL,
        "max_segment_bytes": DEFAULT_SEGMENT_BYTES,
        "segment_ms": DEFAULT_SEGMENT_MS,
    }


def _check_range(field: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        _refuse(field, f"must be an integer between {low} and {high}")


def _refuse(field: str, message: str) -> None:
    raise InvalidRequest(f"{field}: {message}", **{field: [message]})
