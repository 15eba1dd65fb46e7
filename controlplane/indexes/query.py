"""The Index Query: one field's value looked up in an index, answered complete (the
index for what it covers, a scan of the brokers' tail for the rest) by
``spark.query.query_index``. The control plane imports nothing else of Spark, and that
module only when a query runs (it does not load pyspark).

``spark_query_index`` is the one seam to the Spark side (tests stand a fake in there);
``spark_uncovered_too_large`` names the one Spark error the query maps besides bad
values (``TailTooLarge``: the index should be built further first).

Time bounds are ``[from, to)``: ``to`` is exclusive, so ``from`` must be before it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from controlplane.core.errors import InvalidRequest
from controlplane.gateway.tail import TailReader, TailTooLarge
from spark.jobs.spec import IndexSpec

# Query parameters that are not field filters.
RESERVED_PARAMS = frozenset({"from", "to", "limit", "cursor", "tenant", "format"})
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_VALUE_CHARS = 1024
MAX_CURSOR_CHARS = 4096
# Epoch ms the Spark side can take as microseconds in an int64 (pyarrow's timestamps).
MAX_TIME_MS = (2**63 - 1) // 1000
_MS_RE = re.compile(r"-?[0-9]{1,16}")
_LIMIT_RE = re.compile(r"[0-9]{1,4}")


class InvalidQuery(InvalidRequest):
    """The query is malformed: not exactly one field filter, a bad bound, limit or
    cursor, or a value the field's type does not take."""

    code = "invalid_query"


class UnknownIndexField(InvalidRequest):
    """The query filters on a field the index does not declare."""

    code = "unknown_field"


@dataclass(frozen=True)
class Query:
    field: str
    value: str
    from_ms: int | None
    to_ms: int | None
    limit: int
    cursor: str | None


def spark_query_index(spec: IndexSpec, **kwargs: Any) -> Any:
    """``spark.query.query_index(spec, **kwargs)``."""
    from spark.query import query_index

    return query_index(spec, **kwargs)


def spark_uncovered_too_large() -> type[Exception]:
    """``spark.query.UncoveredTooLargeError``: more lies past what the index covers than
    a query reads (``uncovered_bytes`` over ``limit_bytes``)."""
    from spark.query import UncoveredTooLargeError

    return UncoveredTooLargeError


def parse_query(params: dict[str, str], field_names: list[str]) -> Query:
    """The query a request's parameters ask; ``InvalidQuery`` / ``UnknownIndexField``."""
    filters = {k: v for k, v in params.items() if k not in RESERVED_PARAMS}
    if len(filters) != 1:
        raise InvalidQuery(
            f"name exactly one field to look up ({', '.join(field_names)}), e.g. "
            f"?{field_names[0]}=...; got {len(filters)}",
            fields=sorted(filters),
        )
    field, value = next(iter(filters.items()))
    if field not in field_names:
        raise UnknownIndexField(
            f"the index has no field {field!r}: it has {', '.join(field_names)}",
            field=field,
            fields=field_names,
        )
    if len(value) > MAX_VALUE_CHARS:
        raise InvalidQuery(f"{field}: at most {MAX_VALUE_CHARS} characters", field=field)
    cursor = params.get("cursor") or None
    if cursor is not None and len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidQuery("cursor: not a cursor this API gave", cursor=["malformed"])
    return Query(
        field=field,
        value=value,
        from_ms=_time_ms("from", params.get("from")),
        to_ms=_time_ms("to", params.get("to")),
        limit=_limit(params.get("limit")),
        cursor=cursor,
    )


def _time_ms(name: str, raw: str | None) -> int | None:
    """Epoch milliseconds, or an ISO 8601 time (UTC when it names no zone), within
    ``MAX_TIME_MS`` of the epoch."""
    if raw is None or raw == "":
        return None
    rule = f"epoch milliseconds (at most {MAX_TIME_MS} from the epoch) or an ISO 8601 time"
    if _MS_RE.fullmatch(raw):
        ms = int(raw)
    else:
        try:
            parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            ms = int(parsed.timestamp() * 1000)
        except (ValueError, OverflowError):
            raise InvalidQuery(f"{name}: {rule}", **{name: [rule]}) from None
    if abs(ms) > MAX_TIME_MS:
        raise InvalidQuery(f"{name}: {rule}", **{name: [rule]})
    return ms


def _limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    if not _LIMIT_RE.fullmatch(raw) or not 1 <= int(raw) <= MAX_LIMIT:
        rule = f"an integer from 1 to {MAX_LIMIT}"
        raise InvalidQuery(f"limit: {rule}", limit=[rule])
    return int(raw)


def run_query(
    spec: IndexSpec, query: Query, tail: TailReader, partitions: Mapping[str, Sequence[int]]
) -> dict[str, Any]:
    """The answer as the API gives it (``answer_json``) for the partitions of each of the
    index's topics (``partitions``: all of them, including those nothing of which is in
    the store yet)."""
    if query.from_ms is not None and query.to_ms is not None and query.from_ms >= query.to_ms:
        rule = "before to (to is exclusive)"
        raise InvalidQuery(f"from: {rule}", **{"from": [rule]})
    try:
        answer = spark_query_index(
            spec,
            field=query.field,
            value=query.value,
            from_ms=query.from_ms,
            to_ms=query.to_ms,
            limit=query.limit,
            cursor=query.cursor,
            tail=tail,
            partitions=partitions,
        )
    except spark_uncovered_too_large() as exc:  # first: whatever it may subclass
        raise _too_large(exc) from None
    except ValueError as exc:  # spark.query.IndexQueryError: a bad value or cursor
        raise InvalidQuery(f"{query.field}: {exc}", field=query.field) from None
    except OverflowError as exc:  # a bound or value past what Arrow's types hold
        raise InvalidQuery(f"a value out of range: {exc}", field=query.field) from None
    return answer_json(answer)


def _too_large(exc: Exception) -> TailTooLarge:
    size, limit = getattr(exc, "uncovered_bytes", None), getattr(exc, "limit_bytes", None)
    return TailTooLarge(
        f"{size} bytes lie past what the index covers, more than the {limit} a query reads; "
        "build the index further first",
        bytes=size,
        limit=limit,
    )


def answer_json(answer: Any) -> dict[str, Any]:
    return {
        "records": [record_json(r) for r in answer.records],
        "from_index": answer.from_index,
        "from_scan": answer.from_scan,
        "next_cursor": answer.next_cursor,
        "covered": dict(answer.covered),
    }


def record_json(record: Any) -> dict[str, Any]:
    """A record with key, value and header values in base64 (they are bytes) and
    ``value_text`` when the value is UTF-8."""
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "lane": record.lane,
        "key": _b64(record.key),
        "value": _b64(record.value),
        "value_text": _text(record.value),
        "headers": [{"key": k, "value": _b64(v)} for k, v in record.headers],
    }


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
