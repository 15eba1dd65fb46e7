"""What a tenant's topics hold against its quota: the topics app's ``UsageMeter``
(``controlplane.quotas.usage``), registered by ``TopicsConfig.ready``."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from django.db.models import Count, F, Q, Sum

from controlplane.tenants.models import Tenant
from controlplane.topics.models import PartitionAssignment, Topic


class TopicUsage:
    def reserved(self, tenant: Tenant) -> Mapping[str, int]:
        """Topics, partitions, and storage bytes (partitions * retention bytes, summed).
        Topics being deleted still count: their partitions live on until the reconciler
        removes them. Lane topics count for storage only (their lane counts against
        ``max_lanes``); mirror copies for partitions and storage, not as topics (the
        name is one topic in every region). Internal topics (timer logs, kept without
        retention) count for what they store only."""
        trunks = Q(trunk__isnull=True)
        totals = (
            Topic.objects.filter(tenant=tenant)
            .tenant_facing()
            .aggregate(
                topic_count=Count("id", filter=trunks & Q(mirror_of__isnull=True)),
                partition_count=Sum("partitions", filter=trunks, default=0),
                reserved_bytes=Sum(F("partitions") * F("retention_bytes"), default=0),
            )
        )
        return {
            "topics": totals["topic_count"],
            "partitions": totals["partition_count"],
            "storage_bytes": totals["reserved_bytes"],
        }

    def stored_bytes(self, tenant_ids: Collection[int]) -> Mapping[int, int]:
        """What the brokers last reported the tenants' partitions hold, on the leaders'
        disks and only in the object store (tiered storage). A partition counts once (the
        one reported size of its assignment), not once per replica."""
        return dict(
            PartitionAssignment.objects.filter(topic__tenant__in=list(tenant_ids))
            .values_list("topic__tenant_id")
            .annotate(total=Sum(F("size_bytes") + F("remote_only_bytes"), default=0))
            .values_list("topic__tenant_id", "total")
        )
