"""Where tiered storage keeps things in the object store, and the remote manifest.

This module is the specification another program reads a topic from the store by
(``docs/tiered-storage.md`` says the same in prose). Keys below the store's root::

    <topic>/<topic_id>/                       one incarnation of a topic ("_": no id)
        DELETED                               tombstone: being deleted, skip it
        <partition>/manifest/<version>.json   the remote manifest, one object per version
        <partition>/segments/<base>-<id>.log        the segment's records, as on disk
                                     <base>-<id>.index      its offset index
                                     <base>-<id>.timeindex  its time index
                                     <base>-<id>.epochs     its leader epochs (JSON)
                                     <base>-<id>.producers  its producers' state and
                                                            aborted transactions (JSON)

``<version>`` and ``<base>`` (the segment's base offset) are zero-padded to 20 digits, so
keys sort as numbers; ``<id>`` is 16 random hex digits, fresh for every upload, so two
uploads of one segment (a leader that died after uploading and before committing, and its
successor) never write the same key. The ``.log``, ``.index`` and ``.timeindex`` objects
are the segment's files byte for byte (formats in ``dataplane/storage/segment.py``,
``index.py`` and ``dataplane/records``: Kafka's RecordBatch v2).

**The manifest** lists the partition's remote segments. It is the only truth: an object
no manifest lists is not part of the partition (an upload not yet committed, or an orphan
the cleaner removes). A writer commits version N+1 by creating its key, which fails when
another writer got there first (``ObjectStore.create``); the latest version is the one
with the highest number. Its JSON::

    {"format": 1, "version": 7, "topic": "acme.orders", "partition": 0, "topic_id": "42",
     "log_start_offset": 1200,      first offset still kept (total retention)
     "end_offset": 5400,            one past the last offset listed; 0 when none
     "writer": {"broker_id": 1, "leader_epoch": 3}, "written_at_ms": 1764300000000,
     "segments": [{"id": "9f2c...", "base_offset": 1000, "start_offset": 1200,
                   "end_offset": 2400, "size_bytes": 1048576,
                   "first_timestamp": ..., "max_timestamp": ..., "leader_epoch": 3,
                   "uploaded_at_ms": ..., "files": {"log": [size, crc32c], ...}}]}

A segment serves the offsets ``[start_offset, end_offset)``. ``start_offset`` is above
``base_offset`` when an earlier upload (by another replica, whose segments were cut at
other offsets) already covers the start of this segment: its batches below
``start_offset`` are left out of reads, so every offset has exactly one source. Segments
are listed in offset order and do not overlap; ``files`` gives every object's size and
CRC-32C (Castagnoli), checked when it is read whole.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

FORMAT = 1
NO_TOPIC_ID = "_"
DELETED_MARKER = "DELETED"
FILE_KINDS = ("log", "index", "timeindex", "epochs", "producers")
_PAD = 20
MAX_MANIFEST_BYTES = 256 * 1024 * 1024  # ~700 k segments: far past any real partition


class ManifestError(ValueError):
    """A manifest object is not one this format describes."""


def topic_prefix(topic: str, topic_id: str) -> str:
    """The folder of one incarnation of ``topic``."""
    return f"{topic}/{topic_id or NO_TOPIC_ID}"


def partition_prefix(topic: str, topic_id: str, partition: int) -> str:
    return f"{topic_prefix(topic, topic_id)}/{partition}"


def manifest_key(topic: str, topic_id: str, partition: int, version: int) -> str:
    return f"{partition_prefix(topic, topic_id, partition)}/manifest/{version:0{_PAD}d}.json"


def manifest_version(key: str) -> int | None:
    """The version a manifest key names; None for any other key."""
    name = key.rsplit("/", 1)[-1]
    stem, dot, ext = name.partition(".")
    if ext != "json" or not dot or len(stem) != _PAD or not stem.isdigit():
        return None
    return int(stem)


def segment_key(
    topic: str, topic_id: str, partition: int, base_offset: int, segment_id: str, kind: str
) -> str:
    prefix = partition_prefix(topic, topic_id, partition)
    return f"{prefix}/segments/{base_offset:0{_PAD}d}-{segment_id}.{kind}"


def new_segment_id() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One uploaded segment, as the manifest lists it."""

    id: str
    base_offset: int  # the first offset in the objects (the local segment's base)
    start_offset: int  # the first offset served from them (>= base_offset)
    end_offset: int  # one past the last offset served
    size_bytes: int  # of the .log object
    first_timestamp: int  # the first batch's max timestamp (-1: none)
    max_timestamp: int
    leader_epoch: int  # the newest leader epoch of its batches (-1: none)
    uploaded_at_ms: int
    files: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (size, crc32c)

    def key(self, topic: str, topic_id: str, partition: int, kind: str) -> str:
        return segment_key(topic, topic_id, partition, self.base_offset, self.id, kind)

    def keys(self, topic: str, topic_id: str, partition: int) -> list[str]:
        return [self.key(topic, topic_id, partition, kind) for kind in FILE_KINDS]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["files"] = {kind: list(value) for kind, value in self.files.items()}
        return data

    @classmethod
    def from_json(cls, data: Any) -> RemoteSegment:
        if not isinstance(data, dict):
            raise ManifestError("a segment entry must be an object")
        try:
            files = {str(k): (int(v[0]), int(v[1])) for k, v in dict(data["files"]).items()}
            segment = cls(
                id=_text(data["id"]),
                base_offset=_int(data["base_offset"]),
                start_offset=_int(data["start_offset"]),
                end_offset=_int(data["end_offset"]),
                size_bytes=_int(data["size_bytes"]),
                first_timestamp=_int(data["first_timestamp"]),
                max_timestamp=_int(data["max_timestamp"]),
                leader_epoch=_int(data["leader_epoch"]),
                uploaded_at_ms=_int(data["uploaded_at_ms"]),
                files=files,
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ManifestError(f"bad segment entry: {exc}") from exc
        if not segment.base_offset <= segment.start_offset < segment.end_offset:
            raise ManifestError(f"segment {segment.id}: offsets out of order")
        return segment


@dataclass(frozen=True, slots=True)
class Manifest:
    """One version of a partition's remote manifest (see the module docstring)."""

    topic: str
    partition: int
    topic_id: str
    version: int = 0  # 0: none committed yet
    log_start_offset: int = 0
    end_offset: int = 0
    segments: tuple[RemoteSegment, ...] = ()
    writer_broker_id: int = -1
    writer_leader_epoch: int = -1
    written_at_ms: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.segments

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

    @property
    def key(self) -> str:
        return manifest_key(self.topic, self.topic_id, self.partition, self.version)

    def segment_for(self, offset: int) -> RemoteSegment | None:
        """The segment serving ``offset``, or the first one after it (a gap); None past
        the end or before the log start."""
        if offset < self.log_start_offset or offset >= self.end_offset:
            return None
        low, high = 0, len(self.segments)
        while low < high:  # the first segment ending after ``offset``
            middle = (low + high) // 2
            if self.segments[middle].end_offset <= offset:
                low = middle + 1
            else:
                high = middle
        return self.segments[low] if low < len(self.segments) else None

    def next_version(
        self,
        segments: Iterable[RemoteSegment],
        *,
        broker_id: int,
        leader_epoch: int,
        now_ms: int,
    ) -> Manifest:
        """The manifest that follows this one, listing ``segments`` (in offset order); its
        log start is the first one's start, or its end when none is left."""
        listed = tuple(segments)
        end = max(self.end_offset, listed[-1].end_offset if listed else 0)
        return replace(
            self,
            version=self.version + 1,
            log_start_offset=listed[0].start_offset if listed else end,
            end_offset=end,
            segments=listed,
            writer_broker_id=broker_id,
            writer_leader_epoch=leader_epoch,
            written_at_ms=now_ms,
        )

    def to_bytes(self) -> bytes:
        data = {
            "format": FORMAT,
            "version": self.version,
            "topic": self.topic,
            "partition": self.partition,
            "topic_id": self.topic_id,
            "log_start_offset": self.log_start_offset,
            "end_offset": self.end_offset,
            "writer": {
                "broker_id": self.writer_broker_id,
                "leader_epoch": self.writer_leader_epoch,
            },
            "written_at_ms": self.written_at_ms,
            "segments": [segment.to_json() for segment in self.segments],
        }
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        """Parse and check a manifest object; ``ManifestError`` if it is not one."""
        if len(raw) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"a manifest of {len(raw)} bytes is over the limit")
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ManifestError(f"not JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ManifestError(f"not a format-{FORMAT} manifest")
        try:
            writer = dict(data.get("writer") or {})
            manifest = cls(
                topic=_text(data["topic"]),
                partition=_int(data["partition"]),
                topic_id=_text(data["topic_id"]),
                version=_int(data["version"]),
                log_start_offset=_int(data["log_start_offset"]),
                end_offset=_int(data["end_offset"]),
                segments=tuple(RemoteSegment.from_json(s) for s in list(data["segments"])),
                writer_broker_id=_int(writer.get("broker_id", -1)),
                writer_leader_epoch=_int(writer.get("leader_epoch", -1)),
                written_at_ms=_int(data.get("written_at_ms", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"bad manifest: {exc}") from exc
        manifest.check()
        return manifest

    def check(self) -> None:
        """``ManifestError`` unless the segments are in order and within the bounds."""
        previous_end = -1
        for segment in self.segments:
            if segment.start_offset < previous_end:
                raise ManifestError(f"segment {segment.id} overlaps the one before it")
            previous_end = segment.end_offset
        if self.segments and (
            self.log_start_offset > self.segments[0].start_offset
            or self.end_offset != self.segments[-1].end_offset
        ):
            raise ManifestError("log_start_offset or end_offset disagree with the segments")


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value
