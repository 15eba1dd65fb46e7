from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.views import (
    ServiceCreateMixin,
    ServiceDestroyMixin,
    ServiceUpdateMixin,
)
from controlplane.core.choices import Role
from controlplane.core.errors import NotFound
from controlplane.core.permissions import IsPlatformAdmin
from controlplane.regions.api import views as regions_views
from controlplane.regions.api.serializers import BrokerSerializer
from controlplane.regions.models import Broker
from controlplane.tenants.api.scoped import TenantScopedViewSet
from controlplane.topics import acls, reassignment, services
from controlplane.topics.api.serializers import (
    DriftFindingSerializer,
    ReassignSerializer,
    TopicAclCreateSerializer,
    TopicAclSerializer,
    TopicAclUpdateSerializer,
    TopicCreateSerializer,
    TopicSerializer,
    TopicSummarySerializer,
    TopicUpdateSerializer,
)
from controlplane.topics.filtersets import DriftFindingFilterSet, TopicAclFilterSet, TopicFilterSet
from controlplane.topics.models import DriftFinding, Topic, TopicAcl


class TopicViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[Topic],
    ServiceUpdateMixin[Topic],
    ServiceDestroyMixin[Topic],
    TenantScopedViewSet[Topic],
):
    """A tenant's topics, by full name (``<tenant>.<topic>``, dots and all). Viewers
    read; developers create, grow, reconfigure and delete.

    A name means the origin topic; ``?region=NAME`` names the topic of that name in that
    region (a mirror copy, or the origin when it is there). The list shows every region's
    (``?region=`` filters it). Deleting an origin with mirror copies is 409
    ``mirror_copies_exist``; changing or deleting a copy a mirror link keeps is 409
    ``mirror_copy``."""

    queryset = Topic.objects.tenant_facing().select_related(
        "tenant", "cluster__region", "mirror_of__cluster__region", "mirror_link"
    )
    serializer_class = TopicSerializer
    input_serializer_classes = {
        "create": TopicCreateSerializer,
        "partial_update": TopicUpdateSerializer,
        "reassign": ReassignSerializer,
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
        if not self.request.query_params.get("region"):
            queryset = queryset.filter(mirror_of__isnull=True)  # ?region= is the filter's
        return queryset.prefetch_related("assignments__broker", "assignments__leader")

    def get_serializer_class(self) -> type[TopicSummarySerializer]:
        return TopicSummarySerializer if self.action == "list" else TopicSerializer

    @extend_schema(request=ReassignSerializer, responses={202: TopicSerializer})
    @action(detail=True, methods=["post"], permission_classes=[IsPlatformAdmin])
    def reassign(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Move partitions to other brokers without downtime (platform administrators):
        the new replicas are added and catch up, then the old ones are dropped. 202; each
        assignment shows ``target_replicas`` until its move is done."""
        topic = self.get_object()
        data = self.validated_input()
        targets = {entry["partition"]: entry["replicas"] for entry in data["partitions"]}
        topic = reassignment.reassign_partitions(topic, targets, actor=self.actor)
        return self.respond(self.get_queryset().get(pk=topic.pk), status.HTTP_202_ACCEPTED)

    def create_object(self, data: dict[str, Any]) -> Topic:
        tenant = self.tenant_for_write(data.pop("tenant", None))
        return services.create_topic(tenant, actor=self.actor, **data)

    def update_object(self, topic: Topic, data: dict[str, Any]) -> Topic:
        return services.update_topic(topic, actor=self.actor, **data)

    def delete_object(self, topic: Topic) -> Topic:
        return services.delete_topic(topic, actor=self.actor)


class TopicAclViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[TopicAcl],
    ServiceUpdateMixin[TopicAcl],
    TenantScopedViewSet[TopicAcl],
):
    """Topic ACL entries, by id (filter with ``?topic=<tenant>.<name>``). The tenant's
    members read; its tenant admins grant, change and revoke. Brokers enforce them
    from the controller's next push."""

    queryset = TopicAcl.objects.select_related("topic__tenant", "topic__cluster__region")
    serializer_class = TopicAclSerializer
    input_serializer_classes = {
        "create": TopicAclCreateSerializer,
        "partial_update": TopicAclUpdateSerializer,
    }
    tenant_path = "topic__tenant"
    write_role = Role.TENANT_ADMIN
    filterset_class = TopicAclFilterSet
    ordering_fields = ["principal", "created_at"]

    def create_object(self, data: dict[str, Any]) -> TopicAcl:
        name = data["topic"]
        # A topic's full name starts with its tenant's slug (slugs hold no dots).
        tenant = self.tenant_for_write(data.get("tenant") or name.partition(".")[0])
        region = data.get("region")
        topic = Topic.objects.filter(tenant=tenant).named(name, region).first()
        if topic is None:
            where = f" in region {region!r}" if region else ""
            raise NotFound(
                f"topic {name!r} not found in tenant {tenant.slug!r}{where}", field="topic"
            )
        return acls.grant_topic_acl(
            topic, principal=data["principal"], operations=data["operations"], actor=self.actor
        )

    def update_object(self, acl: TopicAcl, data: dict[str, Any]) -> TopicAcl:
        if "operations" not in data:  # PATCH with nothing to change
            return acl
        return acls.update_topic_acl(acl, operations=data["operations"], actor=self.actor)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        acls.revoke_topic_acl(self.get_object(), actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DriftFindingViewSet(viewsets.ReadOnlyModelViewSet[DriftFinding]):
    """What the reconciler found different on brokers; platform administrators only."""

    queryset = DriftFinding.objects.select_related("broker__cluster__region")
    serializer_class = DriftFindingSerializer
    permission_classes = [IsPlatformAdmin]
    filterset_class = DriftFindingFilterSet
    ordering_fields = ["last_seen_at", "created_at", "topic_name", "kind"]
    lookup_value_regex = r"[^/]+"  # any segment: a malformed id is a JSON 404


class BrokerViewSet(regions_views.BrokerViewSet):
    """Brokers (platform administrators only): phase, last heartbeat, address. Creating
    one registers a broker of a ``static`` cluster. Decommissioning one (``POST
    .../decommission``, or ``DELETE``) moves every replica it holds to other brokers,
    then stops it: 202 with the broker, ``decommissioning`` until it holds nothing, then
    ``decommissioned``; 409 when its replicas have nowhere to go."""

    @extend_schema(request=None, responses={202: BrokerSerializer})
    @action(detail=True, methods=["post"])
    def decommission(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Move every replica off the broker, then stop it (see the class docstring)."""
        return self._decommission()

    @extend_schema(responses={202: BrokerSerializer})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Decommission the broker (as ``POST .../decommission``)."""
        return self._decommission()

    def _decommission(self) -> Response:
        broker: Broker = self.get_object()
        broker = reassignment.decommission_broker(broker, actor=self.actor)
        return self.respond(broker, status.HTTP_202_ACCEPTED)
