"""Typed fields out of JSON record values: the one definition of what fits a declared
field, shared by the export, the index build and the index query.

A value is parsed as JSON; a field's ``path`` is dotted (``user.id``: key ``id`` of the
object under key ``user``). Per record, per field, the outcome is one of:

- a typed value;
- **missing** (null): the path ends at an absent key or a JSON ``null``;
- **wrong type**, with its reason: the value there is not of the field's type, or a
  step of the path is not an object (``user`` is a number).

and per record, before any field: a **tombstone** (no value at all), **not JSON**, or
**not an object** (an array, a number...) — such a record has no fields.

Types (``spec.FIELD_TYPES``) and the JSON values that fit them:

=========  ==============================================================
string     a JSON string
long       a JSON integer within the signed 64-bit range (not 1.0, not true)
double     any JSON number (integers widen)
boolean    ``true`` / ``false``
timestamp  an integer (milliseconds since the epoch, UTC) or an ISO-8601 string
           (``2026-11-28T06:00:00Z``; no zone means UTC), kept to the microsecond
=========  ==============================================================

Nothing is coerced across types: ``"42"`` does not fit a long, ``42`` does not fit a
string. Thread safety: pure functions.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from spark.jobs.spec import Field

ARROW_TYPES: Final = {
    "string": pa.string(),
    "long": pa.int64(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
TOMBSTONE: Final = "tombstone: the record has no value"
NOT_AN_OBJECT: Final = "not a JSON object"
_MISSING: Final = object()
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class WrongTypeError(ValueError):
    """A JSON value that does not fit a field's type; the message says why."""


@dataclass(frozen=True)
class Extraction:
    """The fields of a run of records. ``columns[name]``: typed values, null where missing
    or wrong; ``record_errors[i]``: why record i has no fields at all, or None;
    ``field_errors[name][i]``: why record i's field does not fit, or None; ``clean``:
    every record fits."""

    columns: dict[str, pa.Array]
    record_errors: list[str | None]
    field_errors: dict[str, list[str | None]]
    clean: bool = False

    def fits(self) -> pa.BooleanArray:
        """Per record: an object all of whose fields fit (or are missing)."""
        if self.clean:
            return pa.array([True] * len(self.record_errors), pa.bool_())
        return pa.array([self.reason(row) is None for row in range(len(self.record_errors))])

    def reason(self, row: int) -> str | None:
        """Why record ``row`` does not fit (its first field error), or None."""
        if self.record_errors[row] is not None:
            return self.record_errors[row]
        for errors in self.field_errors.values():
            if errors[row] is not None:
                return errors[row]
        return None


def extract(values: Iterable[bytes | None], fields: tuple[Field, ...]) -> Extraction:
    """Every field of every value (see the module docstring).

    Two ways, one outcome: a run of values that all fit is parsed at once by Arrow's JSON
    reader (``_extract_columnar``), which refuses the whole run at the first value that
    does not; then each value is parsed on its own, which says which records do not fit
    and why."""
    listed = list(values)
    return _extract_columnar(listed, fields) or _extract_each(listed, fields)


def _extract_columnar(values: list[bytes | None], fields: tuple[Field, ...]) -> Extraction | None:
    """The extraction if Arrow reads every value as an object whose fields fit, else None."""
    schema = _read_schema(fields)
    if schema is None or not values:
        return None
    try:
        data = b"\n".join(values)  # type: ignore[arg-type]  # a None fails: see below
    except TypeError:
        return None  # a tombstone
    if data.count(b"\n") != len(values) - 1 or b"\r" in data:
        return None  # a value spans lines: rows would not be records
    if not all(v.strip() for v in values):  # type: ignore[union-attr]
        # A blank line gives no row, so another line could give two (``{}{}``) and the
        # count still match: one row per line holds only when no line is blank.
        return None
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=len(data) + 1),
            parse_options=pa_json.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
        if table.num_rows != len(values):
            return None
        columns = {f.name: _leaf(table, f) for f in fields}
    except (pa.ArrowInvalid, UnicodeDecodeError, WrongTypeError):
        return None
    nothing: list[str | None] = [None] * len(values)
    return Extraction(columns, nothing, {f.name: nothing for f in fields}, clean=True)


def _read_schema(fields: tuple[Field, ...]) -> pa.Schema | None:
    """The nested schema Arrow's JSON reader parses ``fields`` with (timestamps as text,
    converted here alike both ways); None when one path is a prefix of another."""
    tree: dict[str, Any] = {}
    for f in fields:
        node = tree
        *parents, leaf = f.path.split(".")
        for step in parents:
            node = node.setdefault(step, {})
            if not isinstance(node, dict):
                return None
        wanted = pa.string() if f.type == "timestamp" else ARROW_TYPES[f.type]
        if node.get(leaf, wanted) != wanted:
            return None
        node[leaf] = wanted

    def arrow(node: dict[str, Any]) -> list[pa.Field]:
        return [
            pa.field(k, pa.struct(arrow(v)) if isinstance(v, dict) else v) for k, v in node.items()
        ]

    return pa.schema(arrow(tree))


def _leaf(table: pa.Table, f: Field) -> pa.Array:
    steps = f.path.split(".")
    column: Any = table.column(steps[0]).combine_chunks()
    for step in steps[1:]:
        column = pc.struct_field(column, step)
    if f.type != "timestamp":
        return column
    return pa.array(
        [None if v is None else _timestamp(v) for v in column.to_pylist()], ARROW_TYPES["timestamp"]
    )


def _extract_each(values: list[bytes | None], fields: tuple[Field, ...]) -> Extraction:
    paths = [(f.name, f.path.split("."), _CONVERTERS[f.type], f.type) for f in fields]
    out: dict[str, list[Any]] = {f.name: [] for f in fields}
    field_errors: dict[str, list[str | None]] = {f.name: [] for f in fields}
    record_errors: list[str | None] = []
    for value in values:
        parsed, error = _parse(value)
        record_errors.append(error)
        for name, steps, convert, type_name in paths:
            typed, why = (None, None) if error else _field(parsed, steps, convert, type_name)
            out[name].append(typed)
            field_errors[name].append(f"{name}: {why}" if why else None)
    columns = {f.name: pa.array(out[f.name], ARROW_TYPES[f.type]) for f in fields}
    return Extraction(columns, record_errors, field_errors)


def parse_value(field: Field, text: str) -> Any:
    """A query's ``text`` as a value of ``field``'s type (``WrongTypeError`` if it is not
    one): a long or double in decimal, ``true``/``false``, a timestamp as milliseconds or
    ISO 8601, a string as it is."""
    if field.type == "string":
        return text
    if field.type == "boolean":
        if text not in ("true", "false"):
            raise WrongTypeError(f"{field.name}: {text!r} is not true or false")
        return text == "true"
    try:
        loaded = json.loads(text) if field.type != "timestamp" or text.isdigit() else text
    except ValueError as exc:
        raise WrongTypeError(f"{field.name}: {text!r} is not a {field.type}") from exc
    try:
        converted: Any = _CONVERTERS[field.type](loaded)
    except WrongTypeError as exc:
        raise WrongTypeError(f"{field.name}: expected {field.type}, got {exc}") from exc
    return converted


def infer_fields(values: Iterable[bytes | None], reserved: frozenset[str]) -> tuple[Field, ...]:
    """Fields for the leaves of JSON objects among ``values``: scalars reached through
    objects (arrays are left out), typed by their first value (a long widens to a double
    if a later one is fractional), named by their path with ``_`` for ``.`` (prefixed
    ``value_`` when that name is ``reserved``), sorted by path."""
    seen: dict[str, str] = {}
    for value in values:
        parsed, error = _parse(value)
        if error is None:
            _leaves(parsed, "", seen)
    found = []
    for path in sorted(seen):
        name = path.replace(".", "_")
        found.append(Field(f"value_{name}" if name in reserved else name, path, seen[path]))
    return tuple(found)


def _leaves(obj: dict[str, Any], prefix: str, seen: dict[str, str]) -> None:
    for key, value in obj.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            _leaves(value, f"{path}.", seen)
            continue
        kind = _json_kind(value)
        if kind is None or not key or "." in key:
            continue
        if path not in seen or (seen[path], kind) == ("long", "double"):
            seen[path] = kind


def _json_kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long" if _LONG_MIN <= value <= _LONG_MAX else "double"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    return None


def _parse(value: bytes | None) -> tuple[Any, str | None]:
    if value is None:
        return None, TOMBSTONE
    try:
        parsed = json.loads(value)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(parsed, dict):
        return None, NOT_AN_OBJECT
    return parsed, None


def _field(
    obj: dict[str, Any], steps: list[str], convert: Callable[[Any], Any], type_name: str
) -> tuple[Any, str | None]:
    """(typed value or None, why it does not fit or None)."""
    current: Any = obj
    for depth, step in enumerate(steps):
        if not isinstance(current, dict):
            where = ".".join(steps[:depth])
            return None, f"{where} is a {_kind_name(current)}, not an object"
        current = current.get(step, _MISSING)
        if current is _MISSING or current is None:
            return None, None
    try:
        return convert(current), None
    except WrongTypeError as exc:
        return None, f"expected {type_name}, got {exc}"


def _kind_name(value: Any) -> str:
    return _json_kind(value) or ("array" if isinstance(value, list) else "object")


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise WrongTypeError(_kind_name(value))
    return value


def _long(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WrongTypeError(_kind_name(value))
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise WrongTypeError(f"{value} (out of the 64-bit range)")
    return value


def _double(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WrongTypeError(_kind_name(value))
    return float(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise WrongTypeError(_kind_name(value))
    return value


def _timestamp(value: Any) -> datetime:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return _EPOCH + timedelta(milliseconds=value)
        except OverflowError as exc:
            raise WrongTypeError(f"{value} (out of range)") from exc
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            raise WrongTypeError(f"{value!r} (not ISO 8601)") from exc
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise WrongTypeError(_kind_name(value))


_CONVERTERS: Final[dict[str, Callable[[Any], Any]]] = {
    "string": _string,
    "long": _long,
    "double": _double,
    "boolean": _boolean,
    "timestamp": _timestamp,
}
