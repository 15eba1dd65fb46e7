from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.views import ServiceCreateMixin, ServiceUpdateMixin
from controlplane.core.choices import Role
from controlplane.core.errors import InvalidRequest
from controlplane.retries import services
from controlplane.retries.api.serializers import (
    DeadLetterPageSerializer,
    DeadLetterSerializer,
    ReplayOutcomeSerializer,
    ReplaySerializer,
    RetryPolicyCreateSerializer,
    RetryPolicySerializer,
    RetryPolicyUpdateSerializer,
)
from controlplane.retries.models import RetryPolicy
from controlplane.tenants.api.scoped import TenantScopedViewSet, named_tenant


def _int(request: Request, name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.lstrip("-").isdigit() or len(raw) > 19:
        raise InvalidRequest(f"{name}: {raw[:40]!r} is not a number", **{name: ["a number"]})
    return int(raw)


class RetryPolicyViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceCreateMixin[RetryPolicy],
    ServiceUpdateMixin[RetryPolicy],
    TenantScopedViewSet[RetryPolicy],
):
    """Consumer groups' retry policies, by group (the id without ``<tenant>.``;
    ``?tenant=`` picks the tenant when the caller has several). Members read, and read
    dead letters; developers create, change, delete and replay. Creating one makes the
    group's retry and dead-letter topics; deleting it deletes them. Another tenant's
    policy, and its dead letters, answer as missing ones (404)."""

    queryset = RetryPolicy.objects.select_related("tenant", "retry_topic", "dead_letter_topic")
    serializer_class = RetryPolicySerializer
    input_serializer_classes = {
        "create": RetryPolicyCreateSerializer,
        "partial_update": RetryPolicyUpdateSerializer,
        "replay": ReplaySerializer,
    }
    read_role = Role.VIEWER
    write_role = Role.DEVELOPER
    ordering_fields = ["group", "created_at"]
    lookup_field = "group"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> Any:
        queryset = super().get_queryset()
        wanted = self.request.query_params.get("tenant")
        return queryset.filter(tenant__slug=wanted) if wanted else queryset

    def get_object(self) -> RetryPolicy:
        lookup = self.kwargs.get(self.lookup_field, "")
        matches = self.get_queryset().filter(group=lookup)
        if "\x00" not in str(lookup) and matches[:2].count() > 1:
            raise InvalidRequest(
                f"several of your tenants have a policy for {lookup!r}: name the tenant (?tenant=)",
                tenant=["name the tenant"],
            )
        return super().get_object()

    @extend_schema(request=RetryPolicyCreateSerializer, responses={201: RetryPolicySerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The tenant first (``named_tenant``: a caller without a role there learns
        nothing of it, not even what the body lacks), then the body."""
        tenant = self.tenant_for_write(named_tenant(request))
        data = self.validated_input()
        data.pop("tenant", None)
        policy = services.create_retry_policy(tenant, actor=self.actor, **data)
        return self.respond(policy, status.HTTP_201_CREATED)

    def update_object(self, policy: RetryPolicy, data: dict[str, Any]) -> RetryPolicy:
        return services.update_retry_policy(policy, actor=self.actor, **data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.delete_retry_policy(self.get_object(), actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[
            OpenApiParameter("partition", OpenApiTypes.INT, description="default 0"),
            OpenApiParameter("offset", OpenApiTypes.INT, description="default: the first kept"),
            OpenApiParameter("limit", OpenApiTypes.INT, description="default 50, at most 200"),
        ],
        responses=DeadLetterPageSerializer,
    )
    @action(detail=True, methods=["get"], url_path="dead-letters")
    def dead_letters(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The group's dead letters of one partition, a page at a time (``next_offset``
        is where the next page starts; null: the last page)."""
        page = services.dead_letters(
            self.get_object(),
            partition=_int(request, "partition", 0) or 0,
            offset=_int(request, "offset", None),
            limit=_int(request, "limit", 50) or 50,
        )
        return Response(DeadLetterPageSerializer(page).data)

    @extend_schema(responses=DeadLetterSerializer)
    @action(
        detail=True,
        methods=["get"],
        url_path=r"dead-letters/(?P<partition>\d{1,9})/(?P<offset>\d{1,19})",
    )
    def dead_letter(
        self, request: Request, partition: str, offset: str, *args: Any, **kwargs: Any
    ) -> Response:
        """One dead letter, with its headers and the reason it is one."""
        letter = services.dead_letter(self.get_object(), int(partition), int(offset))
        return Response(DeadLetterSerializer(letter).data)

    @extend_schema(request=ReplaySerializer, responses=ReplayOutcomeSerializer)
    @action(detail=True, methods=["post"], url_path="dead-letters/replay")
    def replay(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Copy chosen dead letters (``records``), or a range of one partition, back to
        the topics they came from; audited. Each answer says where it went, or why it was
        skipped (not written by the group's retries, its topic not the tenant's any more,
        or one the caller may not produce to). A broker not answering stops the replay
        (503): what was copied before it is audited."""
        policy = self.get_object()
        data = self.validated_input()
        places = [(r["partition"], r["offset"]) for r in data.pop("records", [])]
        outcome = services.replay_dead_letters(policy, records=places, actor=self.actor, **data)
        return Response(ReplayOutcomeSerializer(outcome).data)
