"""Typed fields out of JSON values: every outcome, and the two ways agreeing."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from spark.fields import (
    NOT_AN_OBJECT,
    TOMBSTONE,
    WrongTypeError,
    _extract_each,
    extract,
    infer_fields,
    parse_value,
)
from spark.jobs.spec import Field

FIELDS = (
    Field("user_id", "user.id", "long"),
    Field("country", "country", "string"),
    Field("amount", "amount", "double"),
    Field("paid", "paid", "boolean"),
    Field("at", "at", "timestamp"),
)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, TOMBSTONE),
        (b"not json", "not JSON: "),
        (b"\xff\xfe", "not JSON: "),
        (b"[1, 2]", NOT_AN_OBJECT),
        (b"42", NOT_AN_OBJECT),
        (b'{"user": {"id": "42"}}', "user_id: expected long, got string"),
        (b'{"user": {"id": 1.5}}', "user_id: expected long, got double"),
        (b'{"user": {"id": true}}', "user_id: expected long, got boolean"),
        (b'{"user": {"id": 99999999999999999999}}', "user_id: expected long, got 9999"),
        (b'{"user": 7}', "user_id: user is a long, not an object"),
        (b'{"country": 33}', "country: expected string, got long"),
        (b'{"amount": "1"}', "amount: expected double, got string"),
        (b'{"paid": 1}', "paid: expected boolean, got long"),
        (b'{"at": "yesterday"}', "at: expected timestamp, got 'yesterday' (not ISO 8601)"),
        (b'{"at": [1]}', "at: expected timestamp, got array"),
    ],
)
def test_a_record_that_does_not_fit_says_why(value: bytes | None, reason: str) -> None:
    extraction = extract([b'{"user": {"id": 1}}', value], FIELDS)
    assert extraction.fits().to_pylist() == [True, False]
    found = extraction.reason(1)
    assert found is not None
    assert found.startswith(reason)


def test_absent_and_null_fields_are_nulls_not_errors() -> None:
    extraction = extract([b"{}", b'{"user": null, "country": null}', b'{"user": {}}'], FIELDS)
    assert extraction.fits().to_pylist() == [True, True, True]
    assert all(column.null_count == 3 for column in extraction.columns.values())


def test_values_convert_to_their_types() -> None:
    extraction = extract(
        [
            b'{"user": {"id": 5}, "country": "fr", "amount": 2, "paid": true, "at": 1000}',
            b'{"amount": 2.5, "at": "2026-11-28T06:00:00+02:00", "extra": [1]}',
            b'{"at": "2026-11-28T06:00:00"}',
        ],
        FIELDS,
    )
    assert extraction.columns["user_id"].to_pylist() == [5, None, None]
    assert extraction.columns["amount"].to_pylist() == [2.0, 2.5, None]
    assert extraction.columns["at"].to_pylist() == [
        datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 11, 28, 4, tzinfo=UTC),
        datetime(2026, 11, 28, 6, tzinfo=UTC),
    ]


def test_the_columnar_and_the_per_record_ways_agree_on_records_that_fit() -> None:
    values = [
        json.dumps(
            {
                "user": {"id": n % 7, "name": "x"} if n % 5 else None,
                "country": ["fr", "de"][n % 2],
                "amount": n * 1.5 if n % 3 else n,
                "paid": n % 2 == 0,
                "at": f"2026-11-28T06:00:{n % 60:02d}Z" if n % 4 else None,
                "other": [n],
            }
        ).encode()
        for n in range(500)
    ]
    fast, slow = extract(values, FIELDS), _extract_each(values, FIELDS)
    assert fast.clean
    for f in FIELDS:
        assert fast.columns[f.name].equals(slow.columns[f.name]), f.name


def test_one_bad_record_leaves_the_others_as_they_were() -> None:
    good = [b'{"user": {"id": 1}, "amount": 3}', b'{"user": {"id": 2}}']
    bad = extract([*good, b"nope"], FIELDS)
    assert not bad.clean
    assert bad.columns["user_id"].to_pylist() == [1, 2, None]
    assert bad.columns["amount"].to_pylist() == [3.0, None, None]


def test_inferred_fields_are_the_scalar_leaves_typed_by_their_first_value() -> None:
    values = [
        b'{"user": {"id": 1}, "n": 1, "s": "a", "list": [1], "topic": "x"}',
        b'{"n": 2.5, "s": 3, "b": true}',
        b"not json",
        None,
    ]
    assert infer_fields(values, frozenset({"topic"})) == (
        Field("b", "b", "boolean"),
        Field("n", "n", "double"),
        Field("s", "s", "string"),
        Field("value_topic", "topic", "string"),
        Field("user_id", "user.id", "long"),
    )


def test_query_values_parse_as_the_fields_type() -> None:
    assert parse_value(FIELDS[0], "42") == 42
    assert parse_value(FIELDS[1], "42") == "42"
    assert parse_value(FIELDS[2], "1.5") == 1.5
    assert parse_value(FIELDS[3], "true") is True
    assert parse_value(FIELDS[4], "1000") == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    for field, text in [
        (FIELDS[0], "4x"),
        (FIELDS[0], "1.5"),
        (FIELDS[3], "yes"),
        (FIELDS[4], "x"),
    ]:
        with pytest.raises(WrongTypeError):
            parse_value(field, text)


def test_a_value_of_two_objects_beside_an_empty_one_is_not_taken_for_two_records() -> None:
    extraction = extract([b'{"country": "fr"}{"country": "de"}', b"", b'{"country": "us"}'], FIELDS)
    assert extraction.fits().to_pylist() == [False, False, True]
    assert extraction.columns["country"].to_pylist() == [None, None, "us"]
