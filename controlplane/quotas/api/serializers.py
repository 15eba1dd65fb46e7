from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.quotas.models import Quota
from controlplane.quotas.services import LIMIT_FIELDS, quota_usage

RATE_HELP = "enforced by each broker separately (as Kafka's quotas); 0: unlimited"


class QuotaUsageSerializer(serializers.Serializer[dict[str, Any]]):
    topics = serializers.IntegerField(help_text="trunk topics (lane topics do not count)")
    partitions = serializers.IntegerField(help_text="of trunk topics")
    storage_bytes = serializers.IntegerField(
        help_text="reserved: partitions x retention bytes, summed over topics"
    )
    stored_bytes = serializers.IntegerField(help_text="what the brokers last reported")
    lanes = serializers.IntegerField(help_text="lanes declared (lane topics count as storage)")
    exports = serializers.IntegerField(help_text="Parquet exports declared")
    indexes = serializers.IntegerField(help_text="secondary indexes declared")


class QuotaSerializer(serializers.ModelSerializer[Quota]):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    usage = serializers.SerializerMethodField()

    class Meta:
        model = Quota
        fields = ["tenant", *LIMIT_FIELDS, "usage", "updated_at"]
        read_only_fields = fields

    @extend_schema_field(QuotaUsageSerializer)
    def get_usage(self, quota: Quota) -> dict[str, Any]:
        return quota_usage(quota.tenant)


class QuotaUpdateSerializer(serializers.Serializer[Any]):
    """Any subset of the limits; counts and storage cannot go below current usage."""

    max_topics = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    max_partitions = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    max_storage_bytes = serializers.IntegerField(min_value=0, max_value=2**63 - 1, required=False)
    produce_bytes_per_s = serializers.IntegerField(
        min_value=0, max_value=2**63 - 1, required=False, help_text=RATE_HELP
    )
    fetch_bytes_per_s = serializers.IntegerField(
        min_value=0, max_value=2**63 - 1, required=False, help_text=RATE_HELP
    )
    requests_per_s = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1, required=False, help_text=RATE_HELP
    )
    max_lanes = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    max_mirrors = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    max_exports = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
    max_indexes = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False)
