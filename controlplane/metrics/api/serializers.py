from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.metrics import history


class InstantField(serializers.DateTimeField):
    """An instant of a range, within ``history.EARLIEST`` and ``history.LATEST``: a
    year like 9999 is refused here, named by its field, rather than overflowing later."""

    def to_internal_value(self, value: Any) -> Any:
        instant = super().to_internal_value(value)
        if not history.EARLIEST <= instant <= history.LATEST:
            raise serializers.ValidationError(history.BOUNDS)
        return instant


class MetricsQuerySerializer(serializers.Serializer[Any]):
    """The range of a metrics read: ``from`` and ``to`` (ISO 8601, from 1970 to 9999-01-01;
    default the last hour up to now) and ``step`` (seconds, at most 7 days; default about
    360 points)."""

    to = InstantField(required=False)
    step = serializers.IntegerField(required=False, min_value=1, max_value=history.MAX_STEP_S)

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["from"] = InstantField(required=False)  # a keyword in Python
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
