"""A tenant's transactional ids and half messages, by name (``<tenant>.<id>``). Any role
in the tenant reads; a tenant admin aborts a hanging transaction (fencing its producer)
and decides a pending half message. Another tenant's answers exactly as a missing one
(404): the tenant is the name's prefix, and a caller without a role in it sees nothing
there."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.pagination import Pagination
from controlplane.core.choices import Role
from controlplane.tenants.api.scoped import TenantNamedViewSet
from controlplane.transactions import services
from controlplane.transactions.api.serializers import (
    AbortedProducerSerializer,
    HalfMessageSerializer,
    PartitionProducerSerializer,
    ResolveHalfMessageSerializer,
    TransactionSerializer,
)

TENANT = OpenApiParameter("tenant", OpenApiTypes.STR, description="tenant slug")
TXN = OpenApiParameter(
    "transactional_id", OpenApiTypes.STR, OpenApiParameter.PATH, description="transactional id"
)
GROUP = OpenApiParameter(
    "group", OpenApiTypes.STR, OpenApiParameter.PATH, description="producer group"
)
HALF_ID = OpenApiParameter("half_id", OpenApiTypes.STR, OpenApiParameter.PATH)
TOPIC = OpenApiParameter("topic", OpenApiTypes.STR, OpenApiParameter.PATH, description="topic")
PARTITION = OpenApiParameter("partition", OpenApiTypes.INT, OpenApiParameter.PATH)
PRODUCER_ID = OpenApiParameter("producer_id", OpenApiTypes.INT, OpenApiParameter.PATH)


class TransactionViewSet(TenantNamedViewSet):
    lookup_field = "transactional_id"
    lookup_value_regex = r"[^/]+"
    pagination_class = Pagination
    read_role = Role.VIEWER
    write_role = Role.TENANT_ADMIN
    kind = "transactional id"
    name_field = "transactional_id"

    @extend_schema(
        parameters=[
            TENANT,
            OpenApiParameter(
                "state", OpenApiTypes.STR, many=True, description="only these states (repeat it)"
            ),
        ],
        responses=TransactionSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        """The caller's tenants' transactional ids, a page at a time: state, producer, and
        the open transaction's partitions and age."""
        found = services.list_transactions(
            self.listed_tenants(), states=request.query_params.getlist("state")
        )
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(found, request, view=self)
        return paginator.get_paginated_response(TransactionSerializer(page, many=True).data)

    @extend_schema(parameters=[TXN], responses=TransactionSerializer)
    def retrieve(self, request: Request, transactional_id: str) -> Response:
        tenant = self.named_tenant(transactional_id, self.read_role)
        return Response(
            TransactionSerializer(services.get_transaction(tenant, transactional_id)).data
        )

    @extend_schema(parameters=[TXN], request=None, responses=TransactionSerializer)
    @action(detail=True, methods=["post"])
    def abort(self, request: Request, transactional_id: str) -> Response:
        """Abort the open (hanging) transaction: nothing of it becomes visible, and its
        producer is fenced. 409 (``transaction_not_open``) when none is open. Audited."""
        tenant = self.named_tenant(transactional_id, self.write_role)
        after = services.abort_transaction(tenant, transactional_id, actor=self.actor)
        return Response(TransactionSerializer(after).data)


class HalfMessageViewSet(TenantNamedViewSet):
    pagination_class = Pagination
    read_role = Role.VIEWER
    write_role = Role.TENANT_ADMIN
    kind = "producer group"
    name_field = "producer_group"

    @extend_schema(
        parameters=[
            TENANT,
            OpenApiParameter("group", OpenApiTypes.STR, description="producer group"),
        ],
        responses=HalfMessageSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        """The caller's tenants' half messages: pending ones with their check-backs, and
        those decided within the last hour with who decided them."""
        group = request.query_params.get("group") or None
        tenants = self.listed_tenants()
        if group is not None:
            tenants = [self.named_tenant(group, self.read_role)]
        found = services.list_half_messages(tenants, group=group)
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(found, request, view=self)
        return paginator.get_paginated_response(HalfMessageSerializer(page, many=True).data)

    @extend_schema(
        parameters=[GROUP, HALF_ID],
        request=ResolveHalfMessageSerializer,
        responses=HalfMessageSerializer,
    )
    def resolve(self, request: Request, group: str, half_id: str) -> Response:
        """Commit or roll back a pending half message as an operator (its producer cannot,
        and no check-back decides it). 409 (``transaction_not_open``) once decided.
        Audited."""
        tenant = self.named_tenant(group, self.write_role)
        body = ResolveHalfMessageSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        commit = body.validated_data["outcome"] == "commit"
        after = services.resolve_half_message(
            tenant, group, half_id, commit=commit, actor=self.actor
        )
        return Response(HalfMessageSerializer(after).data)


class PartitionProducerViewSet(TenantNamedViewSet):
    """A partition's producers at its leader, and an operator's abort marker for a
    transaction hanging there (Kafka's ``kafka-transactions --abort``)."""

    read_role = Role.VIEWER
    write_role = Role.TENANT_ADMIN
    kind = "topic"
    name_field = "topic"

    @extend_schema(parameters=[TOPIC, PARTITION], responses=PartitionProducerSerializer(many=True))
    def list(self, request: Request, topic: str, partition: int) -> Response:
        """The partition's producers, with where their open transaction there began."""
        tenant = self.named_tenant(topic, self.read_role)
        found = services.list_partition_producers(tenant, topic, int(partition))
        return Response(PartitionProducerSerializer(found, many=True).data)

    @extend_schema(
        parameters=[TOPIC, PARTITION, PRODUCER_ID],
        request=None,
        responses=AbortedProducerSerializer,
    )
    def abort(self, request: Request, topic: str, partition: int, producer_id: int) -> Response:
        """Write an abort marker for the producer's transaction open on the partition, one
        its coordinator cannot end: its records there are never read at read_committed,
        and the partition's last stable offset moves on. 409 (``transaction_not_open``)
        when none is open there. Audited (``transaction.abort_producer``)."""
        tenant = self.named_tenant(topic, self.write_role)
        first = services.abort_partition_producer(
            tenant, topic, int(partition), int(producer_id), actor=self.actor
        )
        return Response(AbortedProducerSerializer({"txn_first_offset": first}).data)
