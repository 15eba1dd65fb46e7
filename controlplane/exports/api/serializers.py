from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from controlplane.exports import services
from controlplane.exports.choices import ScheduleKind, ValueFormat
from controlplane.exports.models import Export, ExportRun
from spark.jobs.spec import FIELD_TYPES, PARTITION_COLUMNS

RUN_FIELDS = [
    "id", "state", "trigger", "queued_at", "started_at", "finished_at", "manifest_version",
    "covered", "lag", "rows", "bytes", "files", "dead_letter_rows", "error", "requested_by",
]  # fmt: skip

PROGRESS = inline_serializer(
    "JobProgress",
    {
        "covered": serializers.DictField(
            child=serializers.IntegerField(),
            help_text="per '<topic>/<partition>', the end offset (exclusive) the committed "
            "manifest covers",
        ),
        "lag": serializers.DictField(
            child=serializers.IntegerField(),
            help_text="per '<topic>/<partition>', records not yet covered (the end offset "
            "its leader last reported minus covered)",
        ),
        "lag_records": serializers.IntegerField(help_text="the sum of lag"),
    },
)


class FieldSerializer(serializers.Serializer[Any]):
    """One declared column: its name, the dotted JSON path of its value, its type."""

    name = serializers.CharField()
    path = serializers.CharField(help_text="dotted JSON path, e.g. user.id")
    type = serializers.ChoiceField(choices=FIELD_TYPES)


class ExportRunSerializer(serializers.ModelSerializer[ExportRun]):
    """One run: its state, when, what the committed manifest covers after it, the lag it
    left (records per partition) and what it added (rows, bytes, files, dead-letter
    rows: records that did not fit the fields)."""

    covered = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    lag = serializers.DictField(child=serializers.IntegerField(), read_only=True)

    class Meta:
        model = ExportRun
        fields = RUN_FIELDS
        read_only_fields = fields


class ExportSerializer(serializers.ModelSerializer[Export]):
    """An export, its last run and its progress (``covered``, ``lag``)."""

    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    topic = serializers.CharField(source="topic.full_name", read_only=True)
    # DRF takes declared fields off the class, so this name does not hide Serializer.fields.
    fields = FieldSerializer(many=True, read_only=True)  # type: ignore[assignment]
    partition_by = serializers.ListField(child=serializers.CharField(), read_only=True)
    last_run = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Export
        fields = [
            "tenant", "name", "topic", "value_format", "fields", "partition_by", "target_uri",
            "include_lanes", "schedule_kind", "interval_minutes", "cron", "enabled",
            "last_run", "progress", "created_by", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(ExportRunSerializer(allow_null=True))
    def get_last_run(self, export: Export) -> dict[str, Any] | None:
        run = export.runs.order_by("-queued_at", "-pk").first()
        return None if run is None else dict(ExportRunSerializer(run).data)

    @extend_schema_field(PROGRESS)
    def get_progress(self, export: Export) -> dict[str, Any]:
        return services.progress(export)


class ExportUpdateSerializer(serializers.Serializer[Any]):
    """Every field optional; only the given ones change. Types only: the rules are
    ``exports.services``' (one place for each)."""

    value_format = serializers.ChoiceField(choices=ValueFormat.choices, required=False)
    fields = serializers.JSONField(  # type: ignore[assignment]
        required=False,
        help_text="[{name, path, type}]: the columns read from JSON values; none: inferred",
    )
    partition_by = serializers.JSONField(
        required=False, help_text=f"directory columns, of {', '.join(PARTITION_COLUMNS)}"
    )
    target_uri = serializers.CharField(
        required=False, max_length=1024, help_text="a folder path or URI the platform allows"
    )
    include_lanes = serializers.BooleanField(required=False)
    schedule_kind = serializers.ChoiceField(choices=ScheduleKind.choices, required=False)
    interval_minutes = serializers.IntegerField(required=False, allow_null=True)
    cron = serializers.CharField(required=False, allow_blank=True, max_length=128)
    enabled = serializers.BooleanField(required=False)


class ExportCreateSerializer(ExportUpdateSerializer):
    tenant = serializers.CharField(
        required=False, help_text="tenant slug; optional when the caller has one tenant"
    )
    name = serializers.CharField(max_length=64)
    topic = serializers.CharField(max_length=240, help_text="'<tenant>.<topic>' or '<topic>'")
