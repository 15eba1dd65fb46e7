from __future__ import annotations

import base64
from typing import Any

from rest_framework import serializers

from controlplane.retries.models import MAX_ATTEMPTS, RetryPolicy
from controlplane.retries.services import MAX_REPLAY, DeadLetter


class RetryPolicySerializer(serializers.ModelSerializer[RetryPolicy]):
    """A consumer group's retry policy: the group id, attempts and backoff, and the
    topics its retried records come back on and its dead letters end in."""

    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    group_id = serializers.CharField(read_only=True)
    retry_topic = serializers.CharField(
        source="retry_topic.full_name", read_only=True, default=None
    )
    dead_letter_topic = serializers.CharField(
        source="dead_letter_topic.full_name", read_only=True, default=None
    )

    class Meta:
        model = RetryPolicy
        fields = [
            "tenant",
            "group",
            "group_id",
            "max_attempts",
            "backoff_initial_ms",
            "backoff_multiplier",
            "backoff_max_ms",
            "retry_topic",
            "dead_letter_topic",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class RetryPolicyUpdateSerializer(serializers.Serializer[Any]):
    """Every field optional; only the given ones change. Types only: the rules are the
    model's and the services' (one place for each)."""

    max_attempts = serializers.IntegerField(
        required=False,
        help_text=f"deliveries of a record before its dead letter (1-{MAX_ATTEMPTS})",
    )
    backoff_initial_ms = serializers.IntegerField(
        required=False, help_text="the wait before the first retry (1 s to 30 days)"
    )
    backoff_multiplier = serializers.FloatField(
        required=False, help_text="each retry waits this many times the previous (1-10)"
    )
    backoff_max_ms = serializers.IntegerField(required=False, help_text="the longest wait")


class RetryPolicyCreateSerializer(RetryPolicyUpdateSerializer):
    tenant = serializers.CharField(
        required=False, help_text="tenant slug; optional when the caller has one tenant"
    )
    group = serializers.CharField(
        max_length=200, help_text="the group id without its '<tenant>.' (billing for acme.billing)"
    )
    region = serializers.CharField(
        required=False, help_text="where its retry and dead-letter topics go (default: home)"
    )
    partitions = serializers.IntegerField(
        required=False, help_text="of the retry and dead-letter topics (default 1)"
    )


def _bytes(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


class DeadLetterSerializer(serializers.Serializer[DeadLetter]):
    """A dead letter: where it is in the dead-letter topic, why it is there, where it was
    first delivered, and the record (key and value base64, and as UTF-8 text when they
    are; headers likewise)."""

    partition = serializers.IntegerField()
    offset = serializers.IntegerField()
    timestamp = serializers.IntegerField()
    reason = serializers.CharField()
    origin_topic = serializers.SerializerMethodField()
    origin_partition = serializers.SerializerMethodField()
    attempts = serializers.SerializerMethodField()
    key = serializers.SerializerMethodField()
    key_text = serializers.SerializerMethodField()
    value = serializers.SerializerMethodField(method_name="value_of")
    value_text = serializers.SerializerMethodField()
    headers = serializers.SerializerMethodField()

    def get_origin_topic(self, letter: DeadLetter) -> str:
        return letter.origin[0]

    def get_origin_partition(self, letter: DeadLetter) -> int | None:
        return letter.origin[1]

    def get_attempts(self, letter: DeadLetter) -> int:
        return letter.attempts

    def get_key(self, letter: DeadLetter) -> str | None:
        return _bytes(letter.key)

    def get_key_text(self, letter: DeadLetter) -> str | None:
        return _text(letter.key)

    def value_of(self, letter: DeadLetter) -> str | None:
        return _bytes(letter.value)

    def get_value_text(self, letter: DeadLetter) -> str | None:
        return _text(letter.value)

    def get_headers(self, letter: DeadLetter) -> list[dict[str, str | None]]:
        return [{"key": k, "value": _bytes(v), "text": _text(v)} for k, v in letter.headers]


class DeadLetterPageSerializer(serializers.Serializer[Any]):
    partition = serializers.IntegerField()
    log_start_offset = serializers.IntegerField()
    high_watermark = serializers.IntegerField()
    next_offset = serializers.IntegerField(allow_null=True)
    records = DeadLetterSerializer(many=True)


class RecordPlaceSerializer(serializers.Serializer[Any]):
    partition = serializers.IntegerField(min_value=0)
    offset = serializers.IntegerField(min_value=0)


class ReplaySerializer(serializers.Serializer[Any]):
    """Chosen dead letters, or a range of one partition (at most 1000 records)."""

    records = serializers.ListField(
        child=RecordPlaceSerializer(), required=False, max_length=MAX_REPLAY
    )
    partition = serializers.IntegerField(required=False, min_value=0)
    from_offset = serializers.IntegerField(required=False, min_value=0)
    to_offset = serializers.IntegerField(required=False, min_value=0)


class ReplayedSerializer(serializers.Serializer[Any]):
    partition = serializers.IntegerField()
    offset = serializers.IntegerField()
    topic = serializers.CharField()
    to_partition = serializers.IntegerField()
    to_offset = serializers.IntegerField()
    skipped = serializers.CharField()


class ReplayOutcomeSerializer(serializers.Serializer[Any]):
    replayed = serializers.IntegerField()
    skipped = serializers.IntegerField()
    records = ReplayedSerializer(many=True)
