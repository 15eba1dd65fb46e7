from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from controlplane.exports.api.serializers import PROGRESS, RUN_FIELDS, FieldSerializer
from controlplane.indexes import services
from controlplane.indexes.models import Index, IndexBuild


class IndexBuildSerializer(serializers.ModelSerializer[IndexBuild]):
    """One build: its state, when, what the index covers after it and what it added."""

    covered = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    lag = serializers.DictField(child=serializers.IntegerField(), read_only=True)

    class Meta:
        model = IndexBuild
        fields = RUN_FIELDS
        read_only_fields = fields


class IndexSerializer(serializers.ModelSerializer[Index]):
    """An index, its last build and its progress (``covered``, ``lag``)."""

    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    topic = serializers.CharField(source="topic.full_name", read_only=True)
    # DRF takes declared fields off the class, so this name does not hide Serializer.fields.
    fields = FieldSerializer(many=True, read_only=True)  # type: ignore[assignment]
    last_build = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()

    class Meta:
        model = Index
        fields = [
            "tenant", "name", "description", "topic", "value_format", "fields",
            "include_lanes", "last_build", "progress", "created_by", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(IndexBuildSerializer(allow_null=True))
    def get_last_build(self, index: Index) -> dict[str, Any] | None:
        build = index.builds.order_by("-queued_at", "-pk").first()
        return None if build is None else dict(IndexBuildSerializer(build).data)

    @extend_schema_field(PROGRESS)
    def get_progress(self, index: Index) -> dict[str, Any]:
        return services.progress(index)


class IndexUpdateSerializer(serializers.Serializer[Any]):
    """Only the description changes: the topic and fields are the index's identity."""

    description = serializers.CharField(required=False, allow_blank=True, max_length=500)


class IndexCreateSerializer(IndexUpdateSerializer):
    tenant = serializers.CharField(
        required=False, help_text="tenant slug; optional when the caller has one tenant"
    )
    name = serializers.CharField(max_length=64)
    topic = serializers.CharField(max_length=240, help_text="'<tenant>.<topic>' or '<topic>'")
    fields = serializers.JSONField(help_text="[{name, path, type}], 1 to 8")  # type: ignore[assignment]
    include_lanes = serializers.BooleanField(required=False)
    value_format = serializers.ChoiceField(choices=["json"], required=False)


QUERY_RECORD = inline_serializer(
    "IndexedRecord",
    {
        "topic": serializers.CharField(),
        "partition": serializers.IntegerField(),
        "offset": serializers.IntegerField(),
        "timestamp": serializers.IntegerField(help_text="epoch ms"),
        "lane": serializers.CharField(allow_null=True),
        "key": serializers.CharField(allow_null=True, help_text="base64"),
        "value": serializers.CharField(allow_null=True, help_text="base64"),
        "value_text": serializers.CharField(
            allow_null=True, help_text="the value as text when it is UTF-8"
        ),
        "headers": inline_serializer(
            "IndexedRecordHeader",
            {
                "key": serializers.CharField(),
                "value": serializers.CharField(allow_null=True, help_text="base64"),
            },
            many=True,
        ),
    },
)

QUERY_ANSWER = inline_serializer(
    "IndexQueryAnswer",
    {
        "records": QUERY_RECORD.__class__(many=True),
        "from_index": serializers.IntegerField(help_text="records found in the index files"),
        "from_scan": serializers.IntegerField(
            help_text="records found scanning what the index does not cover yet"
        ),
        "next_cursor": serializers.CharField(
            allow_null=True, help_text="pass as ?cursor= for the next page; null: no more"
        ),
        "covered": serializers.DictField(
            child=serializers.IntegerField(),
            help_text="per '<topic>/<partition>', the end offset the index covered",
        ),
    },
)
