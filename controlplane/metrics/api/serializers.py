from __future__ import annotations

from typing import Any

from rest_framework import serializers


class MetricsQuerySerializer(serializers.Serializer[Any]):
    """The range of a metrics read: ``from`` and ``to`` (ISO 8601; default the last hour
    up to now) and ``step`` (seconds; default about 360 points)."""

    to = serializers.DateTimeField(required=False)
    step = serializers.IntegerField(required=False, min_value=1)

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField(required=False)  # a keyword in Python
        return fields

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return {"since": attrs.get("from"), "until": attrs.get("to"), "step_s": attrs.get("step")}


class _PointSerializer(serializers.Serializer[Any]):
    at = serializers.DateTimeField()
    records_per_s = serializers.FloatField(allow_null=True)


class TopicPointSerializer(_PointSerializer):
    bytes_per_s = serializers.FloatField(allow_null=True)


class GroupPointSerializer(_PointSerializer):
    lag_records = serializers.FloatField(allow_null=True)
    lag_s = serializers.FloatField(
        allow_null=True, help_text="null until brokers report lag in time"
    )


class _FrameSerializer(serializers.Serializer[Any]):
    resolution = serializers.IntegerField(help_text="seconds between stored points")
    step = serializers.IntegerField(help_text="seconds covered by each answered point")

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["from"] = serializers.DateTimeField()
        fields["to"] = serializers.DateTimeField()
        return fields


class TopicMetricsSerializer(_FrameSerializer):
    """Produce rates of a topic: records and bytes per second (mean over each step)."""

    topic = serializers.CharField()
    points = TopicPointSerializer(many=True)


class GroupTopicSerializer(serializers.Serializer[Any]):
    topic = serializers.CharField()
    points = GroupPointSerializer(many=True)


class GroupMetricsSerializer(_FrameSerializer):
    """A group's consume rate (mean over each step) and lag (maximum over each step), per
    topic it has committed offsets of."""

    group = serializers.CharField()
    topics = GroupTopicSerializer(many=True)
