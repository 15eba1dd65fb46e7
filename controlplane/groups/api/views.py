"""A tenant's consumer groups, by group id (``<tenant>.<name>``). Any role in the tenant
reads; developers reset offsets and delete. Another tenant's group answers exactly as a
missing one (404): the tenant is the group id's prefix, and a caller without a role in
it sees no group there."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.pagination import Pagination
from controlplane.core.choices import Role
from controlplane.groups import services
from controlplane.groups.api.serializers import (
    GroupDetailSerializer,
    GroupSummarySerializer,
    ResetOffsetsSerializer,
    ResetPlanSerializer,
)
from controlplane.tenants.api.scoped import TenantNamedViewSet
from controlplane.tenants.models import Tenant

GROUP = OpenApiParameter("group", OpenApiTypes.STR, OpenApiParameter.PATH, description="group id")


class GroupViewSet(TenantNamedViewSet):
    lookup_field = "group"
    # Any group id, '/' included (sent as %2F or as is): the reset action's route and
    # the metrics route are tried first (api/urls.py, controlplane/urls.py), so ids
    # ending in "/reset-offsets" or "/metrics" are the ones that cannot be read here.
    lookup_value_regex = r".+"
    pagination_class = Pagination
    read_role = Role.VIEWER
    write_role = Role.DEVELOPER
    kind = "group"
    name_field = "group"

    def _tenant(self, group_id: str, needed: str) -> Tenant:
        return self.named_tenant(group_id, needed)

    def _listed_tenants(self) -> list[Tenant]:
        return self.listed_tenants()

    @extend_schema(
        parameters=[OpenApiParameter("tenant", OpenApiTypes.STR, description="tenant slug")],
        responses=GroupSummarySerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        """The caller's tenants' groups by id, a page at a time (``?limit=&offset=``):
        state, members and total lag. Only the page's groups are described."""
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(
            services.find_groups(self._listed_tenants()), request, view=self
        )
        summaries = services.summarize(page or [])
        return paginator.get_paginated_response(GroupSummarySerializer(summaries, many=True).data)

    @extend_schema(parameters=[GROUP], responses=GroupDetailSerializer)
    def retrieve(self, request: Request, group: str) -> Response:
        """State, members with their assignments, and per partition the committed
        offset, end offset, lag in records and lag in seconds."""
        detail = services.describe_group(self._tenant(group, self.read_role), group)
        return Response(GroupDetailSerializer(detail).data)

    @extend_schema(parameters=[GROUP], request=None, responses={204: None})
    def destroy(self, request: Request, group: str) -> Response:
        """Delete a stopped group and its committed offsets (409 while it has members)."""
        tenant = self._tenant(group, self.write_role)
        services.delete_group(tenant, group, actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[GROUP], request=ResetOffsetsSerializer, responses=ResetPlanSerializer
    )
    @action(detail=True, methods=["post"], url_path="reset-offsets")
    def reset_offsets(self, request: Request, group: str) -> Response:
        """Move a stopped group's committed offsets to earliest, latest, a timestamp or an
        offset; ``dry_run`` answers the moves (current -> new) without making them. 409
        (``group_active``) while the group has members."""
        tenant = self._tenant(group, self.write_role)
        body = ResetOffsetsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        plan = services.reset_group_offsets(tenant, group, actor=self.actor, **body.validated_data)
        return Response(ResetPlanSerializer(plan).data)
