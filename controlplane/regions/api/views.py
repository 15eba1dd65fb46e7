from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.views import (
    ServiceCreateMixin,
    ServiceDestroyMixin,
    ServiceUpdateMixin,
    ServiceViewSet,
)
from controlplane.core.permissions import IsPlatformAdmin, PlatformAdminOrReadOnly
from controlplane.regions import services
from controlplane.regions.api.serializers import (
    BrokerRegisterSerializer,
    BrokerSerializer,
    ClusterCreateSerializer,
    ClusterSerializer,
    ClusterUpdateSerializer,
    RegionCreateSerializer,
    RegionSerializer,
    RegionUpdateSerializer,
)
from controlplane.regions.filtersets import BrokerFilterSet, ClusterFilterSet, RegionFilterSet
from controlplane.regions.models import Broker, Cluster, Region


class RegionViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[Region],
    ServiceUpdateMixin[Region],
    ServiceViewSet[Region],
):
    """Regions, by name: every caller reads them (to choose where topics go);
    platform administrators change them."""

    queryset = Region.objects.all()
    serializer_class = RegionSerializer
    input_serializer_classes = {
        "create": RegionCreateSerializer,
        "partial_update": RegionUpdateSerializer,
    }
    permission_classes = [PlatformAdminOrReadOnly]
    filterset_class = RegionFilterSet
    ordering_fields = ["name", "created_at"]
    lookup_field = "name"

    def create_object(self, data: dict[str, Any]) -> Region:
        return services.create_region(actor=self.actor, **data)

    def update_object(self, region: Region, data: dict[str, Any]) -> Region:
        display_name = data.get("display_name", region.display_name)
        return services.update_region(region, display_name=display_name, actor=self.actor)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Remove a region without clusters or tenants (409 otherwise)."""
        services.delete_region(self.get_object(), actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ClusterViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[Cluster],
    ServiceUpdateMixin[Cluster],
    ServiceDestroyMixin[Cluster],
    ServiceViewSet[Cluster],
):
    """Clusters (platform administrators only). Deleting one without topics stops its
    brokers and removes it after the response (202, status ``deleting``)."""

    queryset = Cluster.objects.select_related("region").prefetch_related("brokers")
    serializer_class = ClusterSerializer
    input_serializer_classes = {
        "create": ClusterCreateSerializer,
        "partial_update": ClusterUpdateSerializer,
    }
    permission_classes = [IsPlatformAdmin]
    filterset_class = ClusterFilterSet
    ordering_fields = ["name", "created_at", "status"]

    def create_object(self, data: dict[str, Any]) -> Cluster:
        region = data.pop("region")
        return services.create_cluster(region, actor=self.actor, **data)

    def update_object(self, cluster: Cluster, data: dict[str, Any]) -> Cluster:
        return services.update_cluster(cluster, actor=self.actor, **data)

    def delete_object(self, cluster: Cluster) -> Cluster:
        return services.delete_cluster(cluster, actor=self.actor)


class BrokerViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[Broker],
    ServiceViewSet[Broker],
):
    """Brokers as the regions app knows them: listed, read and registered (a broker of a
    ``static`` cluster). Decommissioning moves replicas, which is partition state, so
    ``/brokers`` is served by ``controlplane.topics.api.views.BrokerViewSet``, which adds
    it to this one."""

    queryset = Broker.objects.select_related("cluster__region")
    serializer_class = BrokerSerializer
    input_serializer_classes = {"create": BrokerRegisterSerializer}
    permission_classes = [IsPlatformAdmin]
    filterset_class = BrokerFilterSet
    ordering_fields = ["broker_id", "phase", "last_heartbeat_at"]

    def create_object(self, data: dict[str, Any]) -> Broker:
        cluster = data.pop("cluster")
        return services.register_broker(cluster, actor=self.actor, **data)
