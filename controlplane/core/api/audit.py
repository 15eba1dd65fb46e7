"""``/api/v1/audit-events``: read-only. Platform administrators see every event;
tenant administrators see their tenants' events; nobody else reads the log.

A tenant's events are those recorded against its row, not its slug: a slug freed by a
deleted tenant may be taken again, and the new tenant must not read the old one's log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django.db.models import Q, QuerySet
from rest_framework import serializers, viewsets
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.filtersets import FilterSet
from controlplane.core.models import AuditEvent


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    tenant = serializers.CharField(source="tenant_slug", read_only=True)

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor",
            "actor_name",
            "tenant",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "before",
            "after",
        ]
        read_only_fields = fields


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 instant, compared in UTC: any valid offset works (the database refuses
    offsets beyond about 16 hours), and an instant outside the calendar's range is
    clamped to its end."""

    def filter(self, qs: Any, value: datetime | None) -> Any:
        if value is not None:
            try:
                value = value.astimezone(UTC)
            except OverflowError:
                edge = datetime.min if value.year == datetime.min.year else datetime.max
                value = edge.replace(tzinfo=UTC)
        return super().filter(qs, value)


class AuditEventFilterSet(FilterSet):
    action = django_filters.CharFilter(help_text="e.g. topic.create")
    object_type = django_filters.CharFilter(help_text="e.g. topics.topic")
    object_id = django_filters.CharFilter()
    tenant = django_filters.CharFilter(field_name="tenant_slug", help_text="tenant slug")
    actor = django_filters.CharFilter(method="filter_actor", help_text="subject or name")
    since = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["action", "object_type", "object_id", "tenant", "actor", "since", "until"]

    def filter_actor(self, queryset: QuerySet[AuditEvent], name: str, value: str) -> Any:
        return queryset.filter(Q(actor=value) | Q(actor_name=value))


def administered_tenants(actor: Actor) -> list[str]:
    return [slug for slug, role in actor.roles.items() if role == Role.TENANT_ADMIN]


class CanReadAuditLog(BasePermission):
    message = "the audit log is for platform and tenant administrators"

    def has_permission(self, request: Request, view: Any) -> bool:
        actor = request.user
        if not isinstance(actor, Actor):
            return False
        return actor.platform_admin or bool(administered_tenants(actor))


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet[AuditEvent]):
    """Who changed what, newest first."""

    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    permission_classes = [CanReadAuditLog]
    filterset_class = AuditEventFilterSet
    ordering_fields = ["created_at", "action"]
    lookup_value_regex = r"[^/]+"  # any segment: a malformed id is a JSON 404

    def get_queryset(self) -> QuerySet[AuditEvent]:
        actor = self.request.user
        assert isinstance(actor, Actor)
        queryset = super().get_queryset()
        if actor.platform_admin:
            return queryset
        # Through the foreign key: a deleted tenant's events lost theirs (SET_NULL).
        return queryset.filter(tenant__slug__in=administered_tenants(actor))
