from __future__ import annotations

from typing import Any

from rest_framework import mixins
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from controlplane.core.api.views import ServiceUpdateMixin
from controlplane.core.errors import PermissionDenied
from controlplane.quotas import services
from controlplane.quotas.api.serializers import QuotaSerializer, QuotaUpdateSerializer
from controlplane.quotas.filtersets import QuotaFilterSet
from controlplane.quotas.models import Quota
from controlplane.tenants.api.scoped import TenantScopedViewSet


class QuotaViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceUpdateMixin[Quota],
    TenantScopedViewSet[Quota],
):
    """Tenants' quotas with their usage, by tenant slug. Members of a tenant read its
    quota; only platform administrators change it."""

    queryset = Quota.objects.select_related("tenant")
    serializer_class = QuotaSerializer
    input_serializer_classes = {"partial_update": QuotaUpdateSerializer}
    filterset_class = QuotaFilterSet
    ordering_fields = ["tenant__slug", "updated_at"]
    ordering = ["tenant__slug"]
    lookup_field = "tenant__slug"
    lookup_url_kwarg = "tenant"
    lookup_value_regex = r"[^/]+"  # any segment: a malformed slug is a JSON 404

    def check_object_permissions(self, request: Request, obj: Any) -> None:
        super().check_object_permissions(request, obj)
        if request.method not in SAFE_METHODS and not self.actor.platform_admin:
            raise PermissionDenied("only platform administrators may change quotas")

    def update_object(self, quota: Quota, data: dict[str, Any]) -> Quota:
        return services.set_quota(quota.tenant, actor=self.actor, **data)
