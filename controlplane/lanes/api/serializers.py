from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.lanes.choices import OrphanPolicy
from controlplane.lanes.models import Lane, LaneTopic
from controlplane.topics.models import Topic

MAX_TOPICS_NAMED = 1000


class LaneTopicSerializer(serializers.ModelSerializer[Topic]):
    """A lane topic: its full name, partitions, trunk topic and provisioning status."""

    name = serializers.CharField(source="full_name", read_only=True)
    trunk = serializers.CharField(source="trunk.full_name", read_only=True)
    last_traffic_at = serializers.SerializerMethodField()

    class Meta:
        model = Topic
        fields = ["name", "trunk", "partitions", "status", "created_at", "last_traffic_at"]
        read_only_fields = fields

    def get_last_traffic_at(self, topic: Topic) -> str | None:
        link: LaneTopic | None = getattr(topic, "lane_link", None)
        if link is None or link.last_traffic_at is None:
            return None
        return serializers.DateTimeField().to_representation(link.last_traffic_at)


class LaneSerializer(serializers.ModelSerializer[Lane]):
    """A lane: what it covers (``all_topics``, else ``topics``, trunk full names), how
    its consumers read, its TTL and lane-topic partitions (null: the trunk's count), its
    lane topics, and what the brokers last reported: the trunk topics some consumer of
    the lane consumes now (``live_topics``) and the last traffic."""

    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    topics = serializers.SerializerMethodField()
    lane_topics = serializers.SerializerMethodField()
    live_topics = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Lane
        fields = [
            "tenant",
            "name",
            "all_topics",
            "topics",
            "consume_trunk",
            "orphan_policy",
            "ttl_s",
            "partitions",
            "lane_topics",
            "live_topics",
            "last_traffic_at",
            "last_live_at",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_topics(self, lane: Lane) -> list[str]:
        return sorted(t.full_name for t in lane.topics.all())

    @extend_schema_field(LaneTopicSerializer(many=True))
    def get_lane_topics(self, lane: Lane) -> list[dict[str, Any]]:
        topics = (
            Topic.objects.origins()
            .filter(tenant_id=lane.tenant_id, lane_name=lane.name, trunk__isnull=False)
            .select_related("trunk", "lane_link")
            .order_by("full_name")
        )
        return list(LaneTopicSerializer(topics, many=True).data)


class LaneUpdateSerializer(serializers.Serializer[Any]):
    """Every field optional; only the given ones change. Types only: the rules are
    ``lanes.services``' (one place for each)."""

    all_topics = serializers.BooleanField(
        required=False, help_text="covers every topic of the tenant; naming topics sets it false"
    )
    topics = serializers.ListField(
        child=serializers.CharField(max_length=240),
        required=False,
        max_length=MAX_TOPICS_NAMED,
        help_text="trunk topics covered when not all_topics ('<tenant>.<topic>' or '<topic>')",
    )
    consume_trunk = serializers.BooleanField(
        required=False, help_text="the lane's consumers read the trunk topics too"
    )
    orphan_policy = serializers.ChoiceField(
        choices=OrphanPolicy.choices,
        required=False,
        help_text="while no consumer of the lane is live: trunk consumers read its records "
        "(trunk) or they wait (hold)",
    )
    ttl_s = serializers.IntegerField(
        required=False, help_text="deleted (lane topics, then the lane) after this long idle"
    )
    partitions = serializers.IntegerField(
        required=False, allow_null=True, help_text="of new lane topics; null: the trunk's count"
    )


class LaneCreateSerializer(LaneUpdateSerializer):
    tenant = serializers.CharField(
        required=False, help_text="tenant slug; optional when the caller has one tenant"
    )
    name = serializers.CharField(max_length=64)
