"""The manifest log of an export's or an index's target: which files are its output.

A job's output is the files the latest manifest lists, and nothing else: a file no
manifest lists (from a run killed before its commit) is not output, and a re-run writes
the same file under the same name anyway. Keys below the target's root::

    _manifest/<version>.json      one object per version, <version> zero-padded to 20

Version N+1 is committed by creating its key exclusively (``ObjectStore.create``: a hard
link locally, ``If-None-Match: *`` on S3): of two runs that planned on top of version N,
exactly one commits; the other gets ``OverlappingRunError`` and its files, which name the
same offset ranges with the same rows, are never listed twice. Its JSON::

    {"format": 1, "version": 3, "kind": "export" | "index", "written_at_ms": ...,
     "definition": {"topic": "acme.orders", "value_format": "json", "fields": [...],
                    "partition_by": ["date", "hour"], "include_lanes": false},
     "fields": [{"name": "user_id", "path": "user.id", "type": "long"}],   the columns written
     "inferred": false,             true: ``fields`` were inferred by the first run
     "covered": {"acme.orders/0": 1200},   per <topic>/<partition>: every offset below it
                                           is in the listed files (or was counted out)
     "skipped": {"acme.orders/0": 0},      offsets retention removed before they were read
     "files": [{"path": "date=2026-11-28/hour=06/acme.orders-0-<start>-<end>.parquet",
                "topic": "acme.orders", "partition": 0, "start": 0, "end": 1200,
                "rows": 1187, "bytes": 80211, "kind": "data" | "dead_letter" | "index",
                "field": null | "user_id"}],
     "counts": {"rows": ..., "bytes": ..., "files": ..., "dead_letter_rows": ...,
                "missing.<field>": ..., "wrong_type.<field>": ...}}

``path`` is relative to the target's root; ``start``/``end`` are the offsets of the chunk
the file came from (``[start, end)``; a chunk whose records span several hours has one
file per hour, all named by the chunk's range). ``files`` and ``counts`` accumulate over
versions: the latest version alone describes the whole output.

Thread safety: pure functions and immutable values; the store is thread-safe.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from dataplane.tiered.store import ObjectStore, RemoteObjectMissingError
from spark.jobs.spec import Field

FORMAT: Final = 1
FOLDER: Final = "_manifest"
_PAD: Final = 20


class OutputManifestError(Exception):
    """Base of the manifest log's failures."""


class DamagedManifestError(OutputManifestError):
    """A manifest object is not one this format describes."""


class OverlappingRunError(OutputManifestError):
    """Another run committed the version this one meant to: two runs of one job overlapped."""

    def __init__(self, target: str, version: int, latest: int) -> None:
        super().__init__(
            f"{target}: another run committed manifest version {version} first (the latest "
            f"is now {latest}): overlapping runs of one job; nothing of this run was listed"
        )
        self.target = target
        self.version = version
        self.latest = latest


class DefinitionChangedError(OutputManifestError):
    """The target holds the output of another definition (topic, format, fields...)."""

    def __init__(self, target: str, held: dict[str, Any], asked: dict[str, Any]) -> None:
        changed = sorted(k for k in set(held) | set(asked) if held.get(k) != asked.get(k))
        if "export_id" in changed:
            message = (
                f"{target} holds the files of another export; write this export to a new "
                "target (or empty this one)"
            )
        else:
            message = (
                f"{target} holds the output of another definition (changed: "
                f"{', '.join(changed)}); write a changed definition to a new target"
            )
        super().__init__(message)
        self.changed = changed


@dataclass(frozen=True)
class OutputFile:
    path: str
    topic: str
    partition: int
    start: int
    end: int
    rows: int
    bytes: int
    kind: str  # "data" | "dead_letter" | "index"
    field: str | None = None


@dataclass(frozen=True)
class OutputManifest:
    kind: str
    definition: dict[str, Any]
    version: int = 0  # 0: nothing committed yet
    fields: tuple[Field, ...] = ()
    inferred: bool = False
    covered: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    files: tuple[OutputFile, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)
    written_at_ms: int = 0

    def next_version(
        self,
        files: list[OutputFile],
        covered: dict[str, int],
        skipped: dict[str, int],
        counts: dict[str, int],
        *,
        now_ms: int,
    ) -> OutputManifest:
        """The version after this one, adding ``files``, moving ``covered`` forward and
        adding ``skipped`` and ``counts``."""
        return replace(
            self,
            version=self.version + 1,
            files=self.files + tuple(sorted(files, key=_file_order)),
            covered={**self.covered, **covered},
            skipped=_add(self.skipped, skipped),
            counts=_add(self.counts, counts),
            written_at_ms=now_ms,
        )

    def to_bytes(self) -> bytes:
        data = {"format": FORMAT, **asdict(self)}
        return json.dumps(data, sort_keys=True, indent=1).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, key: str = "") -> OutputManifest:
        try:
            data = json.loads(raw)
            if data.pop("format") != FORMAT:
                raise DamagedManifestError(f"{key}: unknown manifest format")
            data["fields"] = tuple(Field(**f) for f in data["fields"])
            data["files"] = tuple(OutputFile(**f) for f in data["files"])
            return cls(**data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DamagedManifestError(f"{key}: not a manifest: {exc}") from exc


def manifest_key(version: int) -> str:
    return f"{FOLDER}/{version:0{_PAD}d}.json"


def versions(store: ObjectStore) -> list[int]:
    """The committed versions, ascending."""
    found = []
    for info in store.list(FOLDER):
        stem = info.key.rsplit("/", 1)[-1].removesuffix(".json")
        if info.key.endswith(".json") and len(stem) == _PAD and stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def latest(store: ObjectStore, kind: str, definition: dict[str, Any]) -> OutputManifest:
    """The latest version (an empty version 0 when none is); ``DefinitionChangedError``
    when it was written for another definition or kind of job."""
    committed = versions(store)
    if not committed:
        return OutputManifest(kind=kind, definition=definition)
    key = manifest_key(committed[-1])
    try:
        manifest = OutputManifest.from_bytes(store.get(key), key)
    except RemoteObjectMissingError as exc:  # versions are never deleted
        raise DamagedManifestError(f"{key} vanished while read") from exc
    if manifest.version != committed[-1]:
        raise DamagedManifestError(f"{key} names version {manifest.version}")
    held = {"kind": manifest.kind, **manifest.definition}
    if held != {"kind": kind, **definition}:
        raise DefinitionChangedError(store.uri, held, {"kind": kind, **definition})
    return manifest


def read_latest(store: ObjectStore) -> OutputManifest | None:
    """The latest version whatever its definition (None when none is committed)."""
    committed = versions(store)
    if not committed:
        return None
    key = manifest_key(committed[-1])
    return OutputManifest.from_bytes(store.get(key), key)


def commit(store: ObjectStore, manifest: OutputManifest) -> None:
    """Create ``manifest``'s version; ``OverlappingRunError`` (saying which version is
    the latest now, read again) when another run did."""
    if not store.create(manifest_key(manifest.version), manifest.to_bytes()):
        raise OverlappingRunError(store.uri, manifest.version, max(versions(store), default=0))


def _add(old: dict[str, int], new: dict[str, int]) -> dict[str, int]:
    merged = dict(old)
    for name, count in new.items():
        merged[name] = merged.get(name, 0) + count
    return merged


def _file_order(entry: OutputFile) -> tuple[str, int, int, str, str]:
    return (entry.topic, entry.partition, entry.start, entry.kind, entry.path)
