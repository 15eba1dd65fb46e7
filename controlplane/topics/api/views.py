from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import mixins, viewsets

from controlplane.core.api.views import (
    ServiceCreateMixin,
    ServiceDestroyMixin,
    ServiceUpdateMixin,
    TenantScopedViewSet,
)
from controlplane.core.permissions import IsPlatformAdmin
from controlplane.tenants.choices import Role
from controlplane.topics import services
from controlplane.topics.api.serializers import (
    DriftFindingSerializer,
    TopicCreateSerializer,
    TopicSerializer,
    TopicSummarySerializer,
    TopicUpdateSerializer,
)
from controlplane.topics.filtersets import DriftFindingFilterSet, TopicFilterSet
from controlplane.topics.models import DriftFinding, Topic


class TopicViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[Topic],
    ServiceUpdateMixin[Topic],
    ServiceDestroyMixin[Topic],
    TenantScopedViewSet[Topic],
):
    """A tenant's topics, by full name (``<tenant>.<topic>``, dots and all). Viewers
    read; developers create, grow, reconfigure and delete."""

    queryset = Topic.objects.select_related("tenant", "cluster__region")
    serializer_class = TopicSerializer
    input_serializer_classes = {
        "create": TopicCreateSerializer,
        "partial_update": TopicUpdateSerializer,
    }
    read_role = Role.VIEWER
    write_role = Role.DEVELOPER
    filterset_class = TopicFilterSet
    ordering_fields = ["full_name", "name", "partitions", "status", "created_at"]
    lookup_field = "full_name"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet[Topic]:
        queryset = super().get_queryset()
        if self.action == "list":
            return queryset  # a list shows no assignments: skip loading them
        return queryset.prefetch_related("assignments__broker", "assignments__leader")

    def get_serializer_class(self) -> type[TopicSummarySerializer]:
        return TopicSummarySerializer if self.action == "list" else TopicSerializer

    def create_object(self, data: dict[str, Any]) -> Topic:
        tenant = self.tenant_for_write(data.pop("tenant", None))
        return services.create_topic(tenant, actor=self.actor, **data)

    def update_object(self, topic: Topic, data: dict[str, Any]) -> Topic:
        return services.update_topic(topic, actor=self.actor, **data)

    def delete_object(self, topic: Topic) -> Topic:
        return services.delete_topic(topic, actor=self.actor)


class DriftFindingViewSet(viewsets.ReadOnlyModelViewSet[DriftFinding]):
    """What the reconciler found different on brokers; platform administrators only."""

    queryset = DriftFinding.objects.select_related("broker__cluster__region")
    serializer_class = DriftFindingSerializer
    permission_classes = [IsPlatformAdmin]
    filterset_class = DriftFindingFilterSet
    ordering_fields = ["last_seen_at", "created_at", "topic_name", "kind"]
    lookup_value_regex = r"[^/]+"  # any segment: a malformed id is a JSON 404
