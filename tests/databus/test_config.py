"""The configuration document's schema: defaults, and every refusal naming its field."""

from __future__ import annotations

import pytest

from databus.config import ConfigError, StreamConfig, parse_config


def test_defaults_fill_what_a_stream_leaves_out() -> None:
    config = parse_config({"streams": {"clicks": {"topic": "acme.clicks"}}}, version=3)
    assert config.version == 3
    assert config.streams["clicks"] == StreamConfig(name="clicks", topic="acme.clicks")
    assert config.to_json()["streams"]["clicks"]["delivery"] == "ack_on_spool"


def test_acks_one_is_taken_as_number_or_text() -> None:
    for acks in (1, "1"):
        stream = parse_config({"streams": {"s": {"topic": "acme.t", "acks": acks}}}).streams["s"]
        assert stream.acks == "1"


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ([], "(document)"),
        ({"streams": [], "x": 1}, "x"),
        ({"streams": []}, "streams"),
        ({"streams": {"Bad Name": {"topic": "acme.t"}}}, "streams.Bad Name"),
        ({"streams": {"s": "acme.t"}}, "streams.s"),
        ({"streams": {"s": {}}}, "streams.s.topic"),
        ({"streams": {"s": {"topic": "acme.t~ppe"}}}, "streams.s.topic"),
        ({"streams": {"s": {"topic": "notatopic"}}}, "streams.s.topic"),
        ({"streams": {"s": {"topic": "acme.t", "colour": "red"}}}, "streams.s.colour"),
        ({"streams": {"s": {"topic": "acme.t", "linger_ms": -1}}}, "streams.s.linger_ms"),
        ({"streams": {"s": {"topic": "acme.t", "linger_ms": True}}}, "streams.s.linger_ms"),
        ({"streams": {"s": {"topic": "acme.t", "linger_ms": 1.5}}}, "streams.s.linger_ms"),
        ({"streams": {"s": {"topic": "acme.t", "batch_bytes": 10}}}, "streams.s.batch_bytes"),
        ({"streams": {"s": {"topic": "acme.t", "compression": "brotli"}}}, "streams.s.compression"),
        ({"streams": {"s": {"topic": "acme.t", "acks": 0}}}, "streams.s.acks"),
        ({"streams": {"s": {"topic": "acme.t", "delivery": "maybe"}}}, "streams.s.delivery"),
        ({"streams": {"s": {"topic": "acme.t", "when_full": "panic"}}}, "streams.s.when_full"),
        ({"streams": {"s": {"topic": "acme.t", "lane": "P P E"}}}, "streams.s.lane"),
        ({"streams": {"s": {"topic": "acme.t", "key_field": "a..b"}}}, "streams.s.key_field"),
        ({"streams": {"s": {"topic": "acme.t", "key_field": 3}}}, "streams.s.key_field"),
    ],
)
def test_a_bad_document_is_refused_naming_the_field(document: object, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(document)
    assert caught.value.field == field
