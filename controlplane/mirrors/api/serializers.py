from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.mirrors import progress
from controlplane.mirrors.choices import Direction, StartPosition
from controlplane.mirrors.models import MirrorLink, MirrorPartition


class MirrorPartitionSerializer(serializers.ModelSerializer[MirrorPartition]):
    """One source partition of one leg (``from_region`` to ``to_region``), as its worker
    last reported it: ``next_source_offset`` is the next source offset to copy,
    ``lag_records`` the source's end minus it, ``lag_seconds`` the age of the oldest
    record not copied yet."""

    from_region = serializers.CharField(source="from_region.name", read_only=True)
    to_region = serializers.CharField(source="to_region.name", read_only=True)

    class Meta:
        model = MirrorPartition
        fields = [
            "from_region", "to_region", "source_topic", "target_topic", "partition", "state",
            "next_source_offset", "source_end_offset", "source_log_start_offset",
            "target_end_offset", "lag_records", "lag_seconds", "copied_records",
            "copied_bytes", "skipped_records", "records_lost_to_retention", "error",
            "error_since", "progress_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields


class MirrorLinkSerializer(serializers.ModelSerializer[MirrorLink]):
    """A mirror link, its status (provisioning of the copies), its health (what its
    workers report) and its partitions with their lag; ``lag_records`` is their sum,
    ``lag_seconds`` their maximum."""

    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    source_region = serializers.CharField(source="source_region.name", read_only=True)
    target_region = serializers.CharField(source="target_region.name", read_only=True)
    topics = serializers.ListField(child=serializers.CharField(), read_only=True)
    partitions = MirrorPartitionSerializer(many=True, read_only=True)
    lag_records = serializers.SerializerMethodField()
    lag_seconds = serializers.SerializerMethodField()

    class Meta:
        model = MirrorLink
        fields = [
            "tenant", "name", "source_region", "target_region", "direction", "topics",
            "topic_pattern", "include_lanes", "start_position", "start_timestamp_ms",
            "paused", "status", "status_reason", "health", "health_reason", "lag_records",
            "lag_seconds", "partitions", "created_by", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_lag_records(self, link: MirrorLink) -> int:
        return int(progress.totals(link.partitions.all())["lag_records"])

    def get_lag_seconds(self, link: MirrorLink) -> float:
        return float(progress.totals(link.partitions.all())["lag_seconds"])


class MirrorLinkUpdateSerializer(serializers.Serializer[Any]):
    """Every field optional; only the given ones change. Types only: the rules are
    ``mirrors.services``' (one place for each)."""

    topics = serializers.ListField(
        child=serializers.CharField(max_length=240),
        required=False,
        help_text=(
            "origin topic names of the source region (without the tenant prefix); "
            "clears topic_pattern"
        ),
    )
    topic_pattern = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text=(
            "a glob matched against short topic names of origin topics (*, ?, [...]; "
            "at most 200 printable characters); clears topics"
        ),
    )
    include_lanes = serializers.BooleanField(
        required=False, help_text="mirror the lane topics of the covered topics too"
    )
    start_position = serializers.ChoiceField(choices=StartPosition.choices, required=False)
    start_timestamp_ms = serializers.IntegerField(
        required=False, allow_null=True, help_text="with start_position timestamp"
    )
    paused = serializers.BooleanField(required=False, help_text="true pauses, false resumes")


class MirrorLinkCreateSerializer(MirrorLinkUpdateSerializer):
    tenant = serializers.CharField(
        required=False, help_text="tenant slug; optional when the caller has one tenant"
    )
    name = serializers.CharField(max_length=64)
    source_region = serializers.CharField(max_length=64, help_text="region name")
    target_region = serializers.CharField(max_length=64, help_text="region name")
    direction = serializers.ChoiceField(
        choices=Direction.choices, required=False, help_text="default one-way"
    )


class FailoverRequestSerializer(serializers.Serializer[Any]):
    group = serializers.CharField(max_length=255, help_text="the group id ('<tenant>.<name>')")
    to_region = serializers.CharField(max_length=64, help_text="one of the link's regions")


class PartitionFailoverSerializer(serializers.Serializer[Any]):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    from_offset = serializers.IntegerField(
        allow_null=True, help_text="the group's committed offset in the region it leaves"
    )
    to_offset = serializers.IntegerField(help_text="the offset committed in to_region")
    exact = serializers.BooleanField(help_text="no record skipped, none repeated")
    may_repeat = serializers.IntegerField(help_text="records the group may see twice")


class FailoverResultSerializer(serializers.Serializer[Any]):
    group = serializers.CharField()
    from_region = serializers.CharField()
    to_region = serializers.CharField()
    partitions = PartitionFailoverSerializer(many=True)
