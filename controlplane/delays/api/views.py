"""A tenant's delayed records: what is pending, the scheduled records of a topic, and
cancelling one by id. Any role in the tenant reads; developers cancel. A tenant the
caller has no role in, a topic it does not have and a record of either answer as
missing ones (404)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.errors import InvalidRequest, NotFound, PermissionDenied
from controlplane.delays import services
from controlplane.delays.api.serializers import (
    CancelledSerializer,
    PendingSummarySerializer,
    ScheduledPageSerializer,
)
from controlplane.tenants.models import Tenant

TENANT = OpenApiParameter(
    "tenant", OpenApiTypes.STR, description="tenant slug; optional when the caller has one"
)
TOPIC = OpenApiParameter("topic", OpenApiTypes.STR, description="a topic's full name")
ID = OpenApiParameter(
    "id", OpenApiTypes.STR, OpenApiParameter.PATH, description="<topic>:<partition>:<offset>"
)


class DelayedRecordViewSet(viewsets.ViewSet):
    lookup_field = "id"
    lookup_value_regex = r"[^/]+"

    @property
    def actor(self) -> Actor:
        user = self.request.user
        assert isinstance(user, Actor)
        return user

    def _tenant(self, needed: str) -> Tenant:
        """The tenant named (``?tenant=``, or the topic's or id's prefix, or the caller's
        only one); 404 when the caller has no role there, 403 without ``needed``."""
        actor = self.actor
        slug = self.request.query_params.get("tenant") or self._named_prefix()
        if not slug and len(actor.tenant_slugs) == 1:
            slug = actor.tenant_slugs[0]
        if not slug:
            raise InvalidRequest("name the tenant (?tenant=)", tenant=["required"])
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None or not (actor.platform_admin or actor.role_in(slug) is not None):
            raise NotFound(f"tenant {slug!r} not found")
        if not actor.can(slug, needed):
            raise PermissionDenied(
                f"your role in tenant {slug!r} does not allow this",
                needed_role=needed,
                role=actor.role_in(slug),
            )
        return tenant

    def _named_prefix(self) -> str:
        named = self.request.query_params.get("topic") or self.kwargs.get("id") or ""
        return named.partition(".")[0] if "." in named else ""

    @extend_schema(
        parameters=[
            TENANT,
            TOPIC,
            OpenApiParameter("limit", OpenApiTypes.INT, description="default 50, at most 500"),
            OpenApiParameter("after", OpenApiTypes.STR, description="the previous page's cursor"),
        ],
        responses=ScheduledPageSerializer,
    )
    def list(self, request: Request) -> Response:
        """The records scheduled for ``topic`` (required), by due time, a page at a time
        (``next_cursor`` goes in ``after``)."""
        tenant = self._tenant(Role.VIEWER)
        name = request.query_params.get("topic")
        if not name:
            raise InvalidRequest("name the topic (?topic=)", topic=["required"])
        topic = services.tenant_topic(tenant, name)
        raw_limit = request.query_params.get("limit") or "50"
        if not raw_limit.isdigit() or len(raw_limit) > 6:
            raise InvalidRequest("limit: a number", limit=["a number"])
        after = request.query_params.get("after")
        page = services.scheduled(
            tenant,
            topic,
            limit=int(raw_limit),
            after=services.Cursor.parse(after) if after else None,
        )
        return Response(ScheduledPageSerializer(page).data)

    @extend_schema(parameters=[TENANT, TOPIC], responses=PendingSummarySerializer)
    @action(detail=False, methods=["get"])
    def pending(self, request: Request) -> Response:
        """How many records wait, in all and by topic (only ``topic``'s when named), and
        what each timer partition holds."""
        tenant = self._tenant(Role.VIEWER)
        name = request.query_params.get("topic")
        if name:
            services.tenant_topic(tenant, name)
        return Response(PendingSummarySerializer(services.pending(tenant, name)).data)

    @extend_schema(parameters=[ID, TENANT], request=None, responses=CancelledSerializer)
    def destroy(self, request: Request, id: str) -> Response:
        """Cancel a scheduled record: 200 with when it was due (again: the same); 404
        when no such record is pending; 409 ``delayed_record_delivered`` when too late."""
        tenant = self._tenant(Role.DEVELOPER)
        cancelled = services.cancel(tenant, id, actor=self.actor)
        return Response(CancelledSerializer(cancelled).data)
