"""The declared columns of an export or an index: ``[{"name", "path", "type"}]`` as
``spark.jobs.spec.Field`` takes them. One rule for both, checked in their models'
``clean()``: a list of at most ``max_fields`` objects with exactly those keys; names
unique column names, none of ``RESERVED_NAMES`` nor of the caller's own ``reserved``
(an index's: its query's parameters); paths dotted JSON paths of at most
``MAX_PATH_DEPTH`` parts; types of ``spark.jobs.spec.FIELD_TYPES``."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from django.core.exceptions import ValidationError

from spark.jobs.spec import FIELD_TYPES, PARTITION_COLUMNS, Field

FIELD_KEYS = frozenset({"name", "path", "type"})
NAME_RE = re.compile(r"\A[a-z_][a-z0-9_]{0,62}\Z")
PATH_PART_RE = re.compile(r"\A[A-Za-z0-9_$@-]{1,64}\Z")
MAX_PATH_DEPTH = 8
# Names the jobs give their own columns (topic, offset...) and the export's partition
# directories: a declared column of that name would be ambiguous.
RESERVED_NAMES = frozenset(
    {"topic", "partition", "offset", "timestamp", "key", "value", "headers", "lane",
     "_error", *PARTITION_COLUMNS}
)  # fmt: skip


def field_problems(
    value: Any, *, min_fields: int, max_fields: int, reserved: Collection[str] = ()
) -> list[str]:
    """Why ``value`` is not a valid field list (empty: it is); ``reserved``: names the
    caller gives another meaning, refused as field names."""
    if not isinstance(value, list):
        return ["a list of {name, path, type} objects"]
    if not min_fields <= len(value) <= max_fields:
        return [f"from {min_fields} to {max_fields} fields"]
    problems: list[str] = []
    seen: set[str] = set()
    for position, item in enumerate(value):
        problem = _item_problem(item)
        if problem is None and item["name"] in reserved:
            problem = f"name {item['name']!r} is reserved (a parameter of the query)"
        if problem is None and item["name"] in seen:
            problem = f"name {item['name']!r} is declared twice"
        if problem is not None:
            problems.append(f"field {position}: {problem}")
        else:
            seen.add(item["name"])
    return problems


def _item_problem(item: Any) -> str | None:
    if not isinstance(item, dict) or set(item) != FIELD_KEYS:
        return "an object of exactly name, path and type"
    name, path, kind = item["name"], item["path"], item["type"]
    if not isinstance(name, str) or not NAME_RE.match(name):
        return "name: lowercase letters, digits and '_', 1-63 characters, not starting with a digit"
    if name in RESERVED_NAMES:
        return f"name {name!r} is reserved (a column the job adds)"
    if not isinstance(path, str) or not _path_ok(path):
        return (
            f"path: a dotted JSON path (user.id) of at most {MAX_PATH_DEPTH} parts of "
            "letters, digits, '_', '-', '$', '@'"
        )
    if kind not in FIELD_TYPES:
        return f"type: one of {', '.join(FIELD_TYPES)}"
    return None


def _path_ok(path: str) -> bool:
    parts = path.split(".")
    return len(parts) <= MAX_PATH_DEPTH and all(PATH_PART_RE.match(p) for p in parts)


def validate_fields(
    value: Any, *, min_fields: int, max_fields: int, reserved: Collection[str] = ()
) -> None:
    """``ValidationError`` listing ``field_problems``."""
    problems = field_problems(
        value, min_fields=min_fields, max_fields=max_fields, reserved=reserved
    )
    if problems:
        raise ValidationError(problems)


def spec_fields(value: list[dict[str, str]]) -> tuple[Field, ...]:
    return tuple(Field(name=f["name"], path=f["path"], type=f["type"]) for f in value)
