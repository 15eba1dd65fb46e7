from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import mixins
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from controlplane.core.actors import Actor
from controlplane.core.api.views import (
    ServiceCreateMixin,
    ServiceDestroyMixin,
    ServiceUpdateMixin,
    ServiceViewSet,
)
from controlplane.tenants import services
from controlplane.tenants.api.serializers import (
    TenantCreateSerializer,
    TenantSerializer,
    TenantUpdateSerializer,
)
from controlplane.tenants.filtersets import TenantFilterSet
from controlplane.tenants.models import Tenant


class TenantPermission(BasePermission):
    """Members read their tenants; platform administrators do everything. Changing a
    tenant one cannot see is a 404 (the queryset hides it), not a 403."""

    message = "only platform administrators may change tenants"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not isinstance(request.user, Actor):
            return False
        return (
            request.method in SAFE_METHODS
            or view.action != "create"
            or (request.user.platform_admin)
        )

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        assert isinstance(request.user, Actor)
        return request.method in SAFE_METHODS or request.user.platform_admin


class TenantViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[Tenant],
    ServiceUpdateMixin[Tenant],
    ServiceDestroyMixin[Tenant],
    ServiceViewSet[Tenant],
):
    """Tenants, by slug."""

    queryset = Tenant.objects.select_related("home_region").prefetch_related("regions")
    serializer_class = TenantSerializer
    input_serializer_classes = {
        "create": TenantCreateSerializer,
        "partial_update": TenantUpdateSerializer,
    }
    permission_classes = [TenantPermission]
    filterset_class = TenantFilterSet
    ordering_fields = ["slug", "name", "created_at", "status"]
    lookup_field = "slug"
    lookup_value_regex = r"[^/]+"  # any segment: a malformed slug is a JSON 404

    def get_queryset(self) -> QuerySet[Tenant]:
        queryset = super().get_queryset()
        if self.actor.platform_admin:
            return queryset
        return queryset.filter(slug__in=self.actor.tenant_slugs)

    def create_object(self, data: dict[str, Any]) -> Tenant:
        return services.create_tenant(actor=self.actor, **data)

    def update_object(self, tenant: Tenant, data: dict[str, Any]) -> Tenant:
        return services.update_tenant(tenant, actor=self.actor, **data)

    def delete_object(self, tenant: Tenant) -> Tenant:
        return services.delete_tenant(tenant, actor=self.actor)
