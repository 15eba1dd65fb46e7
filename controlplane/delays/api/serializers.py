from __future__ import annotations

import base64
from typing import Any

from rest_framework import serializers


def _text(value: bytes) -> str | None:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


class ScheduledRecordSerializer(serializers.Serializer[Any]):
    """A record waiting for its time: its id (which cancels it), where and when it goes,
    its key, the first 256 bytes of its value (base64, and as text when UTF-8) and its
    headers."""

    id = serializers.CharField()
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    deliver_at_ms = serializers.IntegerField()
    timestamp = serializers.IntegerField()
    key = serializers.SerializerMethodField()
    value = serializers.SerializerMethodField(method_name="value_of")
    value_text = serializers.SerializerMethodField()
    value_size = serializers.IntegerField()
    headers = serializers.SerializerMethodField()

    def get_key(self, record: Any) -> str | None:
        return base64.b64encode(record.key).decode() if record.HasField("key") else None

    def value_of(self, record: Any) -> str | None:
        return base64.b64encode(record.value).decode() if record.HasField("value") else None

    def get_value_text(self, record: Any) -> str | None:
        return _text(record.value) if record.HasField("value") else None

    def get_headers(self, record: Any) -> list[dict[str, str | None]]:
        return [
            {
                "key": h.key,
                "value": base64.b64encode(h.value).decode() if h.HasField("value") else None,
            }
            for h in record.headers
        ]


class ScheduledPageSerializer(serializers.Serializer[Any]):
    records = ScheduledRecordSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class TimerPartitionSerializer(serializers.Serializer[Any]):
    region = serializers.CharField()
    cluster = serializers.CharField()
    partition = serializers.IntegerField()
    pending_records = serializers.IntegerField()
    pending_bytes = serializers.IntegerField()
    next_deliver_at_ms = serializers.IntegerField(help_text="-1: nothing pending")
    ready = serializers.BooleanField(help_text="false while its new leader rebuilds its index")


class PendingSummarySerializer(serializers.Serializer[Any]):
    """What the tenant's timer logs hold: pending records and bytes, by topic and by
    timer partition (``complete`` false: some timer partition's leader did not answer)."""

    tenant = serializers.CharField()
    pending_records = serializers.IntegerField()
    pending_bytes = serializers.IntegerField()
    topics = serializers.DictField(child=serializers.IntegerField())
    partitions = TimerPartitionSerializer(many=True)
    complete = serializers.BooleanField()


class CancelledSerializer(serializers.Serializer[Any]):
    id = serializers.CharField()
    deliver_at_ms = serializers.IntegerField()
