from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.views import ServiceCreateMixin, ServiceUpdateMixin
from controlplane.core.choices import Role
from controlplane.exports.api.views import MAX_RUNS_LISTED
from controlplane.indexes import services
from controlplane.indexes.api.serializers import (
    QUERY_ANSWER,
    IndexBuildSerializer,
    IndexCreateSerializer,
    IndexSerializer,
    IndexUpdateSerializer,
)
from controlplane.indexes.filtersets import IndexFilterSet
from controlplane.indexes.models import Index
from controlplane.indexes.query import DEFAULT_LIMIT, MAX_LIMIT
from controlplane.tenants.api.scoped import NamedInTenant, TenantScopedViewSet, named_tenant

QUERY_PARAMETERS = [
    OpenApiParameter(
        "<field>",
        OpenApiTypes.STR,
        description="exactly one of the index's fields with the value to look up, e.g. ?user_id=42",
    ),
    OpenApiParameter("from", OpenApiTypes.STR, description="epoch ms or ISO 8601, inclusive"),
    OpenApiParameter(
        "to", OpenApiTypes.STR, description="epoch ms or ISO 8601, exclusive (after from)"
    ),
    OpenApiParameter(
        "limit", OpenApiTypes.INT, description=f"1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})"
    ),
    OpenApiParameter("cursor", OpenApiTypes.STR, description="next_cursor of the last page"),
    OpenApiParameter(
        "tenant", OpenApiTypes.STR, description="the tenant, when several of yours have the index"
    ),
]


class IndexViewSet(
    NamedInTenant,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[Index],
    ServiceUpdateMixin[Index],
    TenantScopedViewSet[Index],
):
    """A tenant's secondary indexes, by name. Members read and query; developers create,
    change the description, delete (204; the index files go too) and build them
    (``POST .../builds``: 202 with the queued build; 409 ``run_in_progress``).

    ``GET .../query?<field>=<value>&from=&to=&limit=&cursor=``: the matching records,
    complete: from the index for what it covers (``from_index``) and a scan of the
    brokers' tail for the rest (``from_scan``), with timestamps in ``[from, to)``. 400
    ``invalid_query`` (not exactly one field, a bad bound or ``from`` not before ``to``, a
    bad limit, cursor or value), ``unknown_field`` or ``tail_too_large`` (more lies past
    what the index covers than a query reads: build the index first)."""

    queryset = Index.objects.select_related("tenant", "topic")
    serializer_class = IndexSerializer
    input_serializer_classes = {
        "create": IndexCreateSerializer,
        "partial_update": IndexUpdateSerializer,
    }
    read_role = Role.VIEWER
    write_role = Role.DEVELOPER
    filterset_class = IndexFilterSet
    ordering_fields = ["name", "created_at", "updated_at"]
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"
    noun = "an index"

    def get_queryset(self) -> QuerySet[Index]:
        """The query's own parameters are field names, not filters (``filter_backends``
        is off for it), so its ``?tenant=`` is applied here."""
        queryset = super().get_queryset()
        tenant = self.request.query_params.get("tenant")
        if self.action == "query" and tenant:
            queryset = queryset.filter(tenant__slug=tenant)
        return queryset

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The tenant first (``named_tenant``), then the body."""
        tenant = self.tenant_for_write(named_tenant(request))
        data = self.validated_input()
        data.pop("tenant", None)
        created = services.create_index(tenant, actor=self.actor, **data)
        return self.respond(created, status.HTTP_201_CREATED)

    def update_object(self, index: Index, data: dict[str, Any]) -> Index:
        index = services.update_index(index, actor=self.actor, **data)
        return self.get_queryset().get(pk=index.pk)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.delete_index(self.get_object(), actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(methods=["GET"], request=None, responses={200: IndexBuildSerializer(many=True)})
    @extend_schema(methods=["POST"], request=None, responses={202: IndexBuildSerializer})
    @action(detail=True, methods=["get", "post"])
    def builds(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """GET: the latest builds (at most 100), newest first. POST: queue a build now."""
        index = self.get_object()
        if request.method == "POST":
            build = services.request_build(index, actor=self.actor)
            return Response(IndexBuildSerializer(build).data, status=status.HTTP_202_ACCEPTED)
        latest = index.builds.order_by("-queued_at", "-pk")[:MAX_RUNS_LISTED]
        return Response(IndexBuildSerializer(latest, many=True).data)

    @extend_schema(parameters=QUERY_PARAMETERS, responses={200: QUERY_ANSWER})
    @action(detail=True, methods=["get"], filter_backends=[])
    def query(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The records whose field has the value (see the class docstring)."""
        index = self.get_object()
        params = {k: request.query_params.get(k, "") for k in request.query_params}
        return Response(services.query(index, params))
