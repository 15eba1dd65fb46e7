from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.views import ServiceCreateMixin, ServiceUpdateMixin
from controlplane.core.choices import Role
from controlplane.exports import services
from controlplane.exports.api.serializers import (
    ExportCreateSerializer,
    ExportRunSerializer,
    ExportSerializer,
    ExportUpdateSerializer,
)
from controlplane.exports.filtersets import ExportFilterSet
from controlplane.exports.models import Export
from controlplane.tenants.api.scoped import NamedInTenant, TenantScopedViewSet, named_tenant

MAX_RUNS_LISTED = 100


class ExportViewSet(
    NamedInTenant,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[Export],
    ServiceUpdateMixin[Export],
    TenantScopedViewSet[Export],
):
    """A tenant's Parquet exports, by name. Members read; developers create, change,
    delete (204; the files stay) and run them (``POST .../runs``: 202 with the queued
    run; 409 ``run_in_progress`` while one is queued or running).

    Refusals (400 unless said): ``invalid`` (a field, the topic), ``topic_not_tiered``
    (exports read sealed segments from the object store: the topic needs
    remote_storage), ``cluster_without_store``, ``target_not_allowed`` (outside the
    platform's allowed prefixes, relative, ``..``, ``http://``), ``target_overlap``
    (another export writes there); 409 ``conflict`` (name in use), ``quota_exceeded``
    (``max_exports``)."""

    queryset = Export.objects.select_related("tenant", "topic")
    serializer_class = ExportSerializer
    input_serializer_classes = {
        "create": ExportCreateSerializer,
        "partial_update": ExportUpdateSerializer,
    }
    read_role = Role.VIEWER
    write_role = Role.DEVELOPER
    filterset_class = ExportFilterSet
    ordering_fields = ["name", "created_at", "updated_at"]
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"
    noun = "an export"

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The tenant first (``named_tenant``), then the body."""
        tenant = self.tenant_for_write(named_tenant(request))
        data = self.validated_input()
        data.pop("tenant", None)
        created = services.create_export(tenant, actor=self.actor, **data)
        return self.respond(created, status.HTTP_201_CREATED)

    def update_object(self, export: Export, data: dict[str, Any]) -> Export:
        export = services.update_export(export, actor=self.actor, **data)
        return self.get_queryset().get(pk=export.pk)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.delete_export(self.get_object(), actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(methods=["GET"], request=None, responses={200: ExportRunSerializer(many=True)})
    @extend_schema(methods=["POST"], request=None, responses={202: ExportRunSerializer})
    @action(detail=True, methods=["get", "post"])
    def runs(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """GET: the latest runs (at most 100), newest first. POST: queue a run now."""
        export = self.get_object()
        if request.method == "POST":
            run = services.request_run(export, actor=self.actor)
            return Response(ExportRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)
        latest = export.runs.order_by("-queued_at", "-pk")[:MAX_RUNS_LISTED]
        return Response(ExportRunSerializer(latest, many=True).data)
