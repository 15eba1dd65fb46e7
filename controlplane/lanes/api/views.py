from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.views import ServiceCreateMixin, ServiceUpdateMixin
from controlplane.core.choices import Role
from controlplane.core.errors import InvalidRequest
from controlplane.lanes import services
from controlplane.lanes.api.serializers import (
    LaneCreateSerializer,
    LaneSerializer,
    LaneUpdateSerializer,
)
from controlplane.lanes.filtersets import LaneFilterSet
from controlplane.lanes.models import Lane
from controlplane.tenants.api.scoped import TenantScopedViewSet

FORCE = OpenApiParameter(
    "force",
    OpenApiTypes.BOOL,
    description="delete even while the lane has live consumers (else 409 lane_in_use)",
)


class LaneViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[Lane],
    ServiceUpdateMixin[Lane],
    TenantScopedViewSet[Lane],
):
    """A tenant's lanes, by name (``?tenant=<slug>`` picks the tenant when the caller
    sees lanes of that name in several). Members read; developers create, change and
    delete. Deleting is immediate (204) and deletes the lane's lane topics; a lane with
    live consumers is refused (409 ``lane_in_use``) unless ``?force=true``."""

    queryset = Lane.objects.select_related("tenant").prefetch_related("topics")
    serializer_class = LaneSerializer
    input_serializer_classes = {
        "create": LaneCreateSerializer,
        "partial_update": LaneUpdateSerializer,
    }
    read_role = Role.VIEWER
    write_role = Role.DEVELOPER
    filterset_class = LaneFilterSet
    ordering_fields = ["name", "created_at", "last_traffic_at"]
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def get_object(self) -> Lane:
        """The lane named by the URL among the caller's (after ``?tenant=``); a 404 if
        none, a 400 if several tenants have one (name the tenant)."""
        lookup = self.kwargs.get(self.lookup_field, "")
        matches = self.filter_queryset(self.get_queryset()).filter(name=lookup)
        if "\x00" not in str(lookup) and matches[:2].count() > 1:
            raise InvalidRequest(
                f"several of your tenants have a lane {lookup!r}: name the tenant (?tenant=)",
                tenant=["name the tenant"],
            )
        return super().get_object()

    def create_object(self, data: dict[str, Any]) -> Lane:
        tenant = self.tenant_for_write(data.pop("tenant", None))
        data.setdefault("all_topics", not data.get("topics"))
        return services.create_lane(tenant, actor=self.actor, **data)

    def update_object(self, lane: Lane, data: dict[str, Any]) -> Lane:
        if data.get("topics"):
            data.setdefault("all_topics", False)
        lane = services.update_lane(lane, actor=self.actor, **data)
        return self.get_queryset().get(pk=lane.pk)

    @extend_schema(parameters=[FORCE], responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        force = request.query_params.get("force", "").lower() in ("1", "true", "yes")
        services.delete_lane(self.get_object(), actor=self.actor, force=force)
        return Response(status=status.HTTP_204_NO_CONTENT)
