"""The options of the ``meridian`` data source, parsed and checked once.

Options are strings (Spark's contract), case-insensitive; structured ones are JSON:

==================  =====================================================================
option              meaning
==================  =====================================================================
topic               one topic, by its full name ``<tenant>.<topic>``
topicPattern        a regular expression the whole name of each topic read matches
store               the object store's URI (a folder, ``s3://bucket/prefix``, any fsspec)
storeOptions        a JSON object: the fsspec filesystem's options (endpoint, keys)
startingOffsets     ``earliest``, ``latest`` or ``{"<topic>": {"<partition>": offset}}``
endingOffsets       the same, exclusive (``-2``: earliest, ``-1``: latest in the JSON)
startingTimestamp   epoch ms: each partition from its first offset with a timestamp >= it
endingTimestamp     epoch ms: each partition up to its first offset with a timestamp >= it
includeLanes        ``true``: also the lane topics ``<topic>~<lane>`` of the topics read
bootstrap           a broker address: the unsealed tail is read through Fetch
token               the JWT the brokers are asked with (needs ``bootstrap``)
pushFilters         ``true``: filters on topic, partition, offset and timestamp prune splits
                    (off by default: Spark 4 reuses one pruned plan for every later query
                    of the same loaded DataFrame, so ``df.where(...)`` then ``df.count()``
                    would count only what the first query kept; load once per query)
==================  =====================================================================

One of ``topic`` and ``topicPattern``; ``store`` or ``bootstrap`` (or both). An offset
option and a timestamp option for the same end are refused (say which you mean).
Partitions the JSON leaves out start at the earliest offset and end at the latest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

EARLIEST: Final = -2
LATEST: Final = -1
_SPEC_NAMES: Final = {"earliest": EARLIEST, "latest": LATEST}

# An end of the range read: a spec for every partition (EARLIEST/LATEST), per-partition
# offsets ({topic: {partition: offset or spec}}), or a timestamp in ms.
OffsetsSpec = int | dict[str, dict[int, int]]


class SourceOptionError(ValueError):
    """An option of the ``meridian`` data source that cannot be used as given."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"meridian option {option!r}: {reason}")
        self.option = option


@dataclass(frozen=True)
class Bound:
    """One end of the range read: ``offsets`` (a spec for every partition, or
    per-partition offsets with ``unlisted`` for the partitions they leave out), or
    ``timestamp_ms`` when set."""

    offsets: OffsetsSpec
    timestamp_ms: int | None = None
    unlisted: int = EARLIEST

    def offset_for(self, topic: str, partition: int) -> int:
        """The offset, or the EARLIEST/LATEST spec, this bound names for a partition."""
        if isinstance(self.offsets, int):
            return self.offsets
        return self.offsets.get(topic, {}).get(partition, self.unlisted)


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options (see the module docstring)."""

    topic: str | None
    topic_pattern: str | None
    store: str | None
    store_options: dict[str, Any]
    starting: Bound
    ending: Bound
    include_lanes: bool
    bootstrap: str | None
    token: str | None
    push_filters: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
        """Checks and parses ``options``; ``SourceOptionError`` names the bad one.
        ``streaming`` starts at ``latest`` by default (as Kafka's source does)."""
        given = {str(k).lower(): str(v) for k, v in options.items()}
        topic, pattern = given.get("topic"), given.get("topicpattern")
        if (topic is None) == (pattern is None):
            raise SourceOptionError("topic", "give exactly one of topic and topicPattern")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise SourceOptionError("topicPattern", f"not a regular expression: {exc}") from exc
        store, bootstrap = given.get("store"), given.get("bootstrap")
        if not store and not bootstrap:
            raise SourceOptionError("store", "give store, bootstrap or both")
        token = given.get("token")
        if token and not bootstrap:
            raise SourceOptionError("token", "a token is for the brokers: give bootstrap too")
        start_default = LATEST if streaming else EARLIEST
        return cls(
            topic=topic,
            topic_pattern=pattern,
            store=store or None,
            store_options=_json_object(given, "storeoptions", "storeOptions"),
            starting=_bound(given, "starting", start_default, EARLIEST),
            ending=_bound(given, "ending", LATEST, LATEST),
            include_lanes=_flag(given, "includelanes", "includeLanes"),
            bootstrap=bootstrap or None,
            token=token or None,
            push_filters=_flag(given, "pushfilters", "pushFilters"),
        )

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` (a trunk topic) is one this read names."""
        if self.topic is not None:
            return topic == self.topic
        assert self.topic_pattern is not None
        return re.fullmatch(self.topic_pattern, topic) is not None


def _json_object(given: dict[str, str], key: str, name: str) -> dict[str, Any]:
    raw = given.get(key)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SourceOptionError(name, f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise SourceOptionError(name, "must be a JSON object")
    return value


def _flag(given: dict[str, str], key: str, name: str) -> bool:
    raw = given.get(key, "false").strip().lower()
    if raw not in ("true", "false"):
        raise SourceOptionError(name, f"true or false, not {raw!r}")
    return raw == "true"


def _bound(given: dict[str, str], end: str, default: int, unlisted: int) -> Bound:
    """The ``<end>Offsets`` / ``<end>Timestamp`` pair as one bound."""
    offsets_name, timestamp_name = f"{end}Offsets", f"{end}Timestamp"
    raw_offsets = given.get(offsets_name.lower())
    raw_timestamp = given.get(timestamp_name.lower())
    if raw_offsets is not None and raw_timestamp is not None:
        raise SourceOptionError(timestamp_name, f"give {offsets_name} or {timestamp_name}")
    if raw_timestamp is not None:
        try:
            timestamp = int(raw_timestamp)
        except ValueError as exc:
            raise SourceOptionError(timestamp_name, "epoch milliseconds, an integer") from exc
        if timestamp < 0:
            raise SourceOptionError(timestamp_name, "a timestamp cannot be negative")
        return Bound(default, timestamp)
    if raw_offsets is None:
        return Bound(default)
    spec = raw_offsets.strip()
    if spec.lower() in _SPEC_NAMES:
        return Bound(_SPEC_NAMES[spec.lower()])
    return Bound(_offsets_json(offsets_name, spec), None, unlisted)


def _offsets_json(name: str, raw: str) -> dict[str, dict[int, int]]:
    try:
        value = json.loads(raw)
        parsed = {
            str(topic): {int(p): int(offset) for p, offset in dict(partitions).items()}
            for topic, partitions in dict(value).items()
        }
    except (json.JSONDecodeError, TypeError, ValueError) as exc:
        raise SourceOptionError(
            name, 'earliest, latest or JSON {"<topic>": {"<partition>": offset}}'
        ) from exc
    for topic, partitions in parsed.items():
        for partition, offset in partitions.items():
            if partition < 0 or offset < EARLIEST:
                raise SourceOptionError(name, f"{topic}/{partition}: bad offset {offset}")
    return parsed
