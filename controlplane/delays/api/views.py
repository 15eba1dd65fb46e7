"""A tenant's delayed records: what is pending, the scheduled records (of a topic), and
cancelling one by id. Any role in the tenant reads; developers cancel. Lists of a tenant
the caller has no role in, or of a topic it does not have, are empty; a record of either
answers as a missing one (404)."""

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

    def _slug(self) -> str | None:
        """The tenant named (``?tenant=``, or the topic's or id's prefix, or the caller's
        only one); ``InvalidRequest`` when the caller has several and names none."""
        actor = self.actor
        slug = self.request.query_params.get("tenant") or self._named_prefix()
        if slug:
            return slug
        if len(actor.tenant_slugs) > 1:
            raise InvalidRequest("name the tenant (?tenant=)", tenant=["required"])
        return actor.tenant_slugs[0] if actor.tenant_slugs else None

    def _visible(self) -> Tenant | None:
        """The tenant named, when the caller has a role in it (None: nothing to show)."""
        slug = self._slug()
        actor = self.actor
        if not slug or not (actor.platform_admin or actor.role_in(slug) is not None):
            return None
        return Tenant.objects.filter(slug=slug).first()

    def _tenant(self, needed: str) -> Tenant:
        """The tenant named; 404 when the caller has no role there, 403 without
        ``needed``."""
        tenant = self._visible()
        if tenant is None:
            raise NotFound("not found")
        if not self.actor.can(tenant.slug, needed):
            raise PermissionDenied(
                f"your role in tenant {tenant.slug!r} does not allow this",
                needed_role=needed,
                role=self.actor.role_in(tenant.slug),
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
    @action(detail=False, methods=["get"])
    def scheduled(self, request: Request) -> Response:
        """The tenant's scheduled records (only ``topic``'s when named), by due time, a
        page at a time (``next_cursor`` goes in ``after``). A tenant or topic the caller
        does not have lists nothing."""
        raw_limit = request.query_params.get("limit") or "50"
        if not raw_limit.isdigit() or len(raw_limit) > 6:
            raise InvalidRequest("limit: a number", limit=["a number"])
        after = request.query_params.get("after")
        cursor = services.Cursor.parse(after) if after else None
        tenant = self._visible()
        name = request.query_params.get("topic") or None
        if tenant is None:
            return Response(ScheduledPageSerializer(services.ScheduledPage([], None)).data)
        page = services.scheduled(tenant, name, limit=int(raw_limit), after=cursor)
        return Response(ScheduledPageSerializer(page).data)

    @extend_schema(parameters=[TENANT, TOPIC], responses=PendingSummarySerializer)
    @action(detail=False, methods=["get"])
    def pending(self, request: Request) -> Response:
        """How many records wait, in all and by topic (only ``topic``'s when named), and
        what each timer partition holds (nothing for a tenant the caller does not have)."""
        tenant = self._visible()
        name = request.query_params.get("topic") or None
        if tenant is None:
            return Response(PendingSummarySerializer(services.PendingSummary("")).data)
        return Response(PendingSummarySerializer(services.pending(tenant, name)).data)

    @extend_schema(parameters=[ID, TENANT], request=None, responses=CancelledSerializer)
    def destroy(self, request: Request, id: str) -> Response:
        """Cancel a scheduled record: 200 with when it was due (again: the same); 404
        when no such record is pending; 409 ``delayed_record_delivered`` when too late."""
        tenant = self._tenant(Role.DEVELOPER)
        cancelled = services.cancel(tenant, id, actor=self.actor)
        return Response(CancelledSerializer(cancelled).data)
