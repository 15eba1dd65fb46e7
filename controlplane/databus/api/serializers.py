from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from controlplane.core.api.fields import StrictCharField, StrictIntegerField
from controlplane.databus import services
from controlplane.databus.models import DatabusAgent, DatabusConfig

MAX_INT32 = 2**31 - 1


class ResolvedStreamSerializer(serializers.Serializer[Any]):
    """A stream's topic as it is now (the sizes null when the topic is gone)."""

    topic = serializers.CharField()
    max_record_bytes = serializers.IntegerField(allow_null=True)
    partitions = serializers.IntegerField(allow_null=True)


class DatabusConfigSerializer(serializers.ModelSerializer[DatabusConfig]):
    """A Databus configuration: its document (normalised: every stream with every
    setting, defaults filled in), its ``version`` (also the ``ETag``), and per stream
    what its topic is now (``resolved``: the largest record the topic takes and its
    partition count, null when the topic is gone)."""

    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    document = serializers.JSONField(read_only=True)
    resolved = serializers.SerializerMethodField()

    class Meta:
        model = DatabusConfig
        fields = [
            "tenant",
            "name",
            "description",
            "version",
            "document",
            "resolved",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.DictField(child=ResolvedStreamSerializer()))
    def get_resolved(self, config: DatabusConfig) -> dict[str, Any]:
        return {name: r.to_json() for name, r in services.resolve_streams(config).items()}


class DatabusConfigReplaceSerializer(serializers.Serializer[Any]):
    """PUT: the whole configuration (an absent description becomes empty). Types only:
    the document's rules are ``databus.config``'s and ``databus.services``'."""

    document = serializers.JSONField(
        help_text='the configuration document: {"streams": {"<stream>": {"topic": '
        '"<tenant>.<topic>", ...}}}'
    )
    description = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default=""
    )


class DatabusConfigUpdateSerializer(DatabusConfigReplaceSerializer):
    """PATCH: every field optional; only the given ones change."""

    document = serializers.JSONField(required=False, help_text="the configuration document")
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)


class DatabusConfigCreateSerializer(DatabusConfigReplaceSerializer):
    tenant = serializers.CharField(
        required=False, help_text="tenant slug; optional when the caller has one tenant"
    )
    name = serializers.CharField(max_length=64)


class DatabusAgentSerializer(serializers.ModelSerializer[DatabusAgent]):
    """A running agent as its last heartbeat described it: the configuration it runs
    (``config``, by name) at ``version``, that configuration's current version
    (``latest_version``; null: no such configuration any more) and whether it is
    ``up_to_date``; ``live`` when its last heartbeat is at most 60 s old."""

    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    config = serializers.CharField(source="config_name", read_only=True)
    latest_version = serializers.SerializerMethodField()
    up_to_date = serializers.SerializerMethodField()
    live = serializers.SerializerMethodField()
    stats = serializers.JSONField(read_only=True)

    class Meta:
        model = DatabusAgent
        fields = [
            "tenant",
            "agent_id",
            "config",
            "version",
            "latest_version",
            "up_to_date",
            "hostname",
            "pid",
            "started_at",
            "last_seen",
            "live",
            "stats",
            "principal",
        ]
        read_only_fields = fields

    def get_latest_version(self, agent: DatabusAgent) -> int | None:
        return getattr(agent, "latest_version", None)

    def get_up_to_date(self, agent: DatabusAgent) -> bool:
        latest = getattr(agent, "latest_version", None)
        return latest is not None and agent.version == latest

    def get_live(self, agent: DatabusAgent) -> bool:
        return services.is_live(agent, timezone.now())


class HeartbeatSerializer(serializers.Serializer[Any]):
    """An agent's report. Types are strict (a number is never a string); ``stats``
    maps each stream to exactly the counters of ``services.STAT_FIELDS``."""

    tenant = StrictCharField(
        required=False, help_text="tenant slug; optional when the caller has one tenant"
    )
    agent_id = serializers.UUIDField(help_text="the agent's id, stable across its restarts")
    config = StrictCharField(max_length=64, help_text="the configuration it runs, by name")
    version = StrictIntegerField(
        min_value=0, max_value=MAX_INT32, help_text="the version it applied (0: none yet)"
    )
    hostname = StrictCharField(max_length=255)
    pid = StrictIntegerField(min_value=1, max_value=MAX_INT32)
    started_at = serializers.DateTimeField(help_text="when the agent started (ISO 8601)")
    stats = serializers.JSONField(
        help_text="per stream: records_in, records_out, bytes_in, bytes_out, spool_records, "
        "spool_bytes, dropped, rejected (integers) and spool_age_s (a number)"
    )

    def validate_agent_id(self, value: Any) -> Any:
        if not isinstance(self.initial_data.get("agent_id"), str):
            raise serializers.ValidationError("must be a UUID string")
        return value


HEARTBEAT_ANSWER = inline_serializer(
    "DatabusHeartbeatAnswer",
    {
        "agent_id": serializers.UUIDField(),
        "latest_version": serializers.IntegerField(allow_null=True),
    },
)
