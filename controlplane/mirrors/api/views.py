from __future__ import annotations

import dataclasses
from typing import Any

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.views import ServiceUpdateMixin
from controlplane.core.choices import Role
from controlplane.mirrors import failover, services
from controlplane.mirrors.api.serializers import (
    FailoverRequestSerializer,
    FailoverResultSerializer,
    MirrorLinkCreateSerializer,
    MirrorLinkSerializer,
    MirrorLinkUpdateSerializer,
    MirrorPartitionSerializer,
)
from controlplane.mirrors.filtersets import MirrorLinkFilterSet
from controlplane.mirrors.models import MirrorLink, MirrorPartition
from controlplane.tenants.api.scoped import NamedInTenant, TenantScopedViewSet, named_tenant

PARTITIONS = Prefetch(
    "partitions",
    queryset=MirrorPartition.objects.select_related("from_region", "to_region").order_by(
        "from_region__name", "source_topic", "partition"
    ),
)


class MirrorLinkViewSet(
    NamedInTenant,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceUpdateMixin[MirrorLink],
    TenantScopedViewSet[MirrorLink],
):
    """A tenant's mirror links, by name (``?region=`` lists the links with that region
    on either side). Members read; developers create, change (``paused`` pauses and
    resumes), delete (202: ``deleting`` until the workers stopped; the copies stay) and
    move consumer groups (``POST .../failover-group``).

    Refusals (400 unless said): ``invalid`` (a field), ``same_region``,
    ``region_not_allowed`` (the tenant has no quota there), ``topics_or_pattern``,
    ``invalid_pattern`` (not a glob of at most 200 printable characters),
    ``topic_not_found`` (not the tenant's, or not in the source region),
    ``source_is_copy`` (a mirror copy there, not an origin topic),
    ``target_topic_exists`` (the target region has a topic of that name this link did
    not make); 409 ``conflict`` (name in use), ``quota_exceeded``
    (``max_mirrors``, or the copies' partitions and storage)."""

    queryset = MirrorLink.objects.select_related(
        "tenant", "source_region", "target_region"
    ).prefetch_related(PARTITIONS)
    serializer_class = MirrorLinkSerializer
    input_serializer_classes = {
        "create": MirrorLinkCreateSerializer,
        "partial_update": MirrorLinkUpdateSerializer,
        "failover_group": FailoverRequestSerializer,
    }
    read_role = Role.VIEWER
    write_role = Role.DEVELOPER
    filterset_class = MirrorLinkFilterSet
    ordering_fields = ["name", "created_at", "updated_at"]
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"
    noun = "a mirror link"

    @extend_schema(request=MirrorLinkCreateSerializer, responses={201: MirrorLinkSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The tenant first (``named_tenant``), then the body."""
        tenant = self.tenant_for_write(named_tenant(request))
        data = self.validated_input()
        data.pop("tenant", None)
        link = services.create_link(tenant, actor=self.actor, **data)
        return self.respond(self.get_queryset().get(pk=link.pk), status.HTTP_201_CREATED)

    def update_object(self, link: MirrorLink, data: dict[str, Any]) -> MirrorLink:
        link = services.update_link(link, actor=self.actor, **data)
        return self.get_queryset().get(pk=link.pk)

    @extend_schema(responses={202: MirrorLinkSerializer})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Stop the link: 202, ``deleting`` until its workers stopped, then gone. Its
        copies stay, with their records (copies no link keeps: deletable topics)."""
        link = services.delete_link(self.get_object(), actor=self.actor)
        return self.respond(self.get_queryset().get(pk=link.pk), status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: MirrorPartitionSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def partitions(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Per leg and source partition, the copy's progress and lag."""
        link = self.get_object()
        return Response(MirrorPartitionSerializer(link.partitions.all(), many=True).data)

    @extend_schema(
        request=FailoverRequestSerializer,
        responses={200: FailoverResultSerializer},
        description="Move a consumer group's committed positions to ``to_region`` (409 "
        "``group_active`` while it has live members in either region).",
    )
    @action(detail=True, methods=["post"], url_path="failover-group")
    def failover_group(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        link = self.get_object()
        data = self.validated_input()
        result = failover.failover_group(link, data["group"], data["to_region"], self.actor)
        return Response(FailoverResultSerializer(dataclasses.asdict(result)).data)
