"""What the control plane asks of a Spark job, and what the job answers: plain JSON.

The control plane writes an ``ExportSpec`` or ``IndexSpec`` to a private file (0600: it
holds store credentials) and launches the job on it; the job prints a ``JobResult`` as
its last stdout line. Neither side imports the other: this module (no pyspark, no
Django) is the whole seam.

Fields:
- ``topic``: the full topic name (``<tenant>.<topic>``); ``include_lanes`` adds its lane
  topics (``<topic>~<lane>``), whose rows carry the lane in the ``lane`` column.
- ``store_uri`` / ``store_options``: the object store the topic's cluster tiers to; jobs
  read sealed segments from it only, never from the brokers.
- ``target_uri`` / ``target_options``: where the output goes (an export's Parquet files,
  an index's files), with its manifest under ``_manifest/``.
- ``value_format``: ``json`` (values parsed as JSON objects) or ``raw`` (bytes as they are).
- ``fields``: the declared columns, each ``{"name", "path", "type"}``; ``path`` is a
  dotted JSON path (``user.id``), ``type`` one of ``FIELD_TYPES``. An export with no
  fields and ``json`` infers them; an index always declares them.
- ``partition_by``: export directory columns from the record timestamp (``date``,
  ``hour``), in that order.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final, Self

FIELD_TYPES: Final = ("string", "long", "double", "boolean", "timestamp")
VALUE_FORMATS: Final = ("json", "raw")
PARTITION_COLUMNS: Final = ("date", "hour")


class _Json:
    """JSON both ways for the dataclasses below (unknown fields refused)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, text: str) -> Self:
        loaded: Self = _load(cls, json.loads(text))
        return loaded


@dataclass(frozen=True)
class Field:
    name: str
    path: str
    type: str


@dataclass(frozen=True)
class ExportSpec(_Json):
    export_id: str
    topic: str
    store_uri: str
    target_uri: str
    value_format: str = "json"
    fields: tuple[Field, ...] = ()
    partition_by: tuple[str, ...] = ()
    include_lanes: bool = False
    store_options: dict[str, Any] = field(default_factory=dict)
    target_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexSpec(_Json):
    index_id: str
    topic: str
    store_uri: str
    target_uri: str
    fields: tuple[Field, ...]
    value_format: str = "json"
    include_lanes: bool = False
    store_options: dict[str, Any] = field(default_factory=dict)
    target_options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobResult(_Json):
    """A run's outcome. ``covered``: per ``"<topic>/<partition>"`` the end offset (exclusive)
    the committed manifest covers after the run; ``rows``/``bytes``/``files``/
    ``dead_letter_rows``: what this run added; ``manifest_version``: the version it
    committed (the previous one when it had nothing to add)."""

    status: str  # "succeeded" | "failed"
    manifest_version: int = 0
    covered: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    bytes: int = 0
    files: int = 0
    dead_letter_rows: int = 0
    error: str = ""


def _load(cls: Any, data: Any) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: a JSON object expected")
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown fields {sorted(unknown)}")
    values = dict(data)
    if "fields" in values:
        values["fields"] = tuple(Field(**f) for f in values["fields"])
    if "partition_by" in values:
        values["partition_by"] = tuple(values["partition_by"])
    return cls(**values)
