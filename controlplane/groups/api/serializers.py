from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.groups.choices import ResetTarget

# Offsets and timestamps are 64-bit on the wire: a larger number is the caller's 400.
MAX_INT64 = 2**63 - 1


class GroupPartitionSerializer(serializers.Serializer[Any]):
    topic = serializers.CharField()
    partition = serializers.IntegerField()


class GroupSummarySerializer(serializers.Serializer[Any]):
    group_id = serializers.CharField()
    tenant = serializers.CharField()
    state = serializers.CharField()
    members = serializers.IntegerField()
    lag = serializers.IntegerField(help_text="Records not yet consumed, over every partition.")
    lag_seconds = serializers.FloatField(
        help_text="Age of the oldest unconsumed record over every partition (0: caught up)."
    )


class GroupMemberSerializer(serializers.Serializer[Any]):
    member_id = serializers.CharField()
    client_id = serializers.CharField()
    client_host = serializers.CharField()
    assignment = GroupPartitionSerializer(many=True)


class PartitionPositionSerializer(serializers.Serializer[Any]):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    committed = serializers.IntegerField(allow_null=True)
    end_offset = serializers.IntegerField()
    lag = serializers.IntegerField(allow_null=True)
    lag_seconds = serializers.FloatField(
        allow_null=True,
        help_text="Age of the record at the committed offset (the oldest unconsumed one).",
    )
    oldest_unconsumed_timestamp = serializers.IntegerField(
        allow_null=True, help_text="Its timestamp (ms); null when caught up."
    )


class GroupDetailSerializer(serializers.Serializer[Any]):
    group_id = serializers.CharField()
    tenant = serializers.CharField()
    state = serializers.CharField()
    protocol = serializers.CharField()
    generation_id = serializers.IntegerField()
    lag = serializers.IntegerField()
    lag_seconds = serializers.FloatField()
    members = GroupMemberSerializer(many=True)
    partitions = PartitionPositionSerializer(many=True)


class ResetOffsetsSerializer(serializers.Serializer[Any]):
    """Where to move the group's offsets; ``topic`` (and ``partitions``) narrow it,
    otherwise every partition the group committed moves."""

    to = serializers.ChoiceField(choices=ResetTarget.choices)
    topic = serializers.CharField(required=False)
    partitions = serializers.ListField(
        child=serializers.IntegerField(min_value=0), required=False, allow_empty=False
    )
    timestamp = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_INT64, help_text="ms; for to=timestamp"
    )
    offset = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_INT64, help_text="for to=offset"
    )
    dry_run = serializers.BooleanField(
        default=False, help_text="Answer the moves without making them (the preview)."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        needs = {ResetTarget.TIMESTAMP: "timestamp", ResetTarget.OFFSET: "offset"}
        field = needs.get(attrs["to"])
        if field is not None and attrs.get(field) is None:
            raise serializers.ValidationError({field: f"required with to={attrs['to']}"})
        if attrs.get("partitions") and not attrs.get("topic"):
            raise serializers.ValidationError({"topic": "required with partitions"})
        return attrs


class OffsetMoveSerializer(serializers.Serializer[Any]):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    current = serializers.IntegerField(allow_null=True)
    new = serializers.IntegerField()


class ResetPlanSerializer(serializers.Serializer[Any]):
    group_id = serializers.CharField()
    to = serializers.CharField()
    dry_run = serializers.BooleanField()
    moves = OffsetMoveSerializer(many=True)
