from __future__ import annotations

import re
import time
import uuid
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api.views import ServiceCreateMixin, ServiceUpdateMixin
from controlplane.core.choices import Role
from controlplane.core.errors import InvalidRequest, NotFound
from controlplane.databus import services
from controlplane.databus.api.serializers import (
    HEARTBEAT_ANSWER,
    DatabusAgentSerializer,
    DatabusConfigCreateSerializer,
    DatabusConfigReplaceSerializer,
    DatabusConfigSerializer,
    DatabusConfigUpdateSerializer,
    HeartbeatSerializer,
)
from controlplane.databus.filtersets import DatabusAgentFilterSet, DatabusConfigFilterSet
from controlplane.databus.models import DatabusAgent, DatabusConfig
from controlplane.tenants.api.scoped import NamedInTenant, TenantScopedViewSet, named_tenant

WATCH_DEFAULT_S = 25.0
WATCH_MAX_S = 30.0
WATCH_POLL_S = 0.5
_TAG = re.compile(r'^(?:W/)?"?([^"]*)"?$')

ETAG = OpenApiParameter(
    "ETag",
    OpenApiTypes.STR,
    location=OpenApiParameter.HEADER,
    response=True,
    description='the configuration\'s version, quoted ("3")',
)
IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    OpenApiTypes.STR,
    location=OpenApiParameter.HEADER,
    description='the version the caller has, quoted ("3"); absent: answer at once',
)
WAIT = OpenApiParameter(
    "wait",
    OpenApiTypes.NUMBER,
    description=f"seconds to wait for a change (default {WATCH_DEFAULT_S:g}, "
    f"at most {WATCH_MAX_S:g})",
)


class DatabusConfigViewSet(
    NamedInTenant,
    mixins.ListModelMixin,
    ServiceCreateMixin[DatabusConfig],
    ServiceUpdateMixin[DatabusConfig],
    TenantScopedViewSet[DatabusConfig],
):
    """A tenant's Databus configurations, by name (``?tenant=<slug>`` picks the tenant
    when the caller sees configurations of that name in several). Members (and the
    tenant's service accounts, which agents run with) read and watch; developers create,
    change (PATCH: the given fields; PUT: the whole) and delete (204).

    A document is refused with 400 ``invalid`` naming the field under ``document``, as
    the schema (``databus.config``) names it: ``{"document":
    {"streams.clicks.linger_ms": ["must be ..."]}}``. Reading a configuration answers
    its version as ``ETag``; ``watch`` waits for it to change."""

    queryset = DatabusConfig.objects.select_related("tenant")
    serializer_class = DatabusConfigSerializer
    input_serializer_classes = {
        "create": DatabusConfigCreateSerializer,
        "partial_update": DatabusConfigUpdateSerializer,
        "update": DatabusConfigReplaceSerializer,
    }
    read_role = Role.VIEWER
    write_role = Role.DEVELOPER
    filterset_class = DatabusConfigFilterSet
    ordering_fields = ["name", "created_at", "updated_at"]
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"
    noun = "a Databus configuration"

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The tenant first: a caller learns nothing of a tenant it has no role in, not
        even what its body lacks."""
        tenant = self.tenant_for_write(named_tenant(request))
        data = self.validated_input()
        data.pop("tenant", None)
        config = services.create_databus_config(tenant, actor=self.actor, **data)
        return self.respond(config, status.HTTP_201_CREATED)

    def update_object(self, config: DatabusConfig, data: dict[str, Any]) -> DatabusConfig:
        config = services.update_databus_config(config, actor=self.actor, **data)
        return self.get_queryset().get(pk=config.pk)

    def respond(self, obj: DatabusConfig, code: int = status.HTTP_200_OK) -> Response:
        return Response(self.get_serializer(obj).data, status=code, headers=_etag(obj.version))

    @extend_schema(parameters=[ETAG])
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.respond(self.get_object())

    @extend_schema(request=DatabusConfigReplaceSerializer, parameters=[ETAG])
    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """PUT: the document and the description (absent: empty) replace the current."""
        config = self.get_object()
        return self.respond(self.update_object(config, self.validated_input()))

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.delete_databus_config(self.get_object(), actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[WAIT, IF_NONE_MATCH, ETAG],
        responses={
            200: DatabusConfigSerializer,
            304: OpenApiResponse(description="unchanged after `wait` seconds (no body)"),
        },
    )
    @action(detail=True, methods=["get"])
    def watch(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Long poll: the configuration (as ``retrieve``) as soon as its version differs
        from the one ``If-None-Match`` names (at once when it already does, or none is
        named); 304 without a body if it has not changed within ``wait`` seconds; 404
        once it is deleted."""
        wait_s = _wait_s(request.query_params.get("wait"))
        config = self.get_object()
        known = _tags(request.headers.get("If-None-Match"))
        deadline = time.monotonic() + wait_s
        version: int | None = config.version
        while version is not None and _matches(version, known):
            if time.monotonic() >= deadline:
                return Response(status=status.HTTP_304_NOT_MODIFIED, headers=_etag(version))
            time.sleep(min(WATCH_POLL_S, max(deadline - time.monotonic(), 0.0)))
            version = services.current_version(config.pk)
        if version is None:
            raise NotFound(f"Databus configuration {config.name!r} was deleted")
        return self.respond(self.get_queryset().get(pk=config.pk))


def _etag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


def _tags(header: str | None) -> set[str]:
    """The entity tags ``If-None-Match`` names (``"3"``, ``W/"3"``, ``*``)."""
    if not header:
        return set()
    tags = set()
    for part in header.split(","):
        match = _TAG.match(part.strip())
        if match:
            tags.add(match.group(1))
    return tags


def _matches(version: int, tags: set[str]) -> bool:
    return "*" in tags or str(version) in tags


def _wait_s(raw: str | None) -> float:
    if raw is None or raw == "":
        return WATCH_DEFAULT_S
    try:
        wait_s = float(raw)
    except ValueError:
        wait_s = -1.0
    if not 0 <= wait_s <= WATCH_MAX_S:  # NaN too
        rule = f"seconds from 0 to {WATCH_MAX_S:g}"
        raise InvalidRequest(f"wait: {rule}", wait=[rule])
    return wait_s


class DatabusAgentViewSet(
    NamedInTenant,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    TenantScopedViewSet[DatabusAgent],
):
    """The agents of a tenant's configurations, as their last heartbeat described them
    (``?config=<name>`` for one configuration's). Members read. Agents post
    ``heartbeat`` with their tenant's service account (any role of the tenant may);
    agents silent for 7 days are forgotten."""

    queryset = DatabusAgent.objects.select_related("tenant")
    serializer_class = DatabusAgentSerializer
    read_role = Role.VIEWER
    write_role = Role.VIEWER  # a heartbeat is a report, not a change of desired state
    filterset_class = DatabusAgentFilterSet
    ordering_fields = ["config_name", "hostname", "last_seen", "started_at"]
    lookup_field = "agent_id"
    lookup_value_regex = r"[^/]+"
    noun = "a Databus agent"

    def get_queryset(self) -> QuerySet[DatabusAgent]:
        return services.with_latest_version(super().get_queryset())

    def get_object(self) -> DatabusAgent:
        lookup = str(self.kwargs.get(self.lookup_field, ""))
        try:
            uuid.UUID(lookup)
        except ValueError:
            raise NotFound("not found") from None
        return super().get_object()  # type: ignore[no-any-return]

    @extend_schema(request=HeartbeatSerializer, responses={200: HEARTBEAT_ANSWER})
    @action(detail=False, methods=["post"])
    def heartbeat(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Record the agent's report (an upsert by ``agent_id`` within the tenant) and
        answer the current version of the configuration it names (null: none of that
        name)."""
        tenant = self.tenant_for_write(named_tenant(request))
        serializer = HeartbeatSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        actor = self.actor
        latest = services.record_agent_heartbeat(
            tenant,
            agent_id=data["agent_id"],
            config_name=data["config"],
            version=data["version"],
            hostname=data["hostname"],
            pid=data["pid"],
            started_at=data["started_at"],
            stats=data["stats"],
            principal=actor.account_id or actor.subject,
        )
        return Response({"agent_id": str(data["agent_id"]), "latest_version": latest})
