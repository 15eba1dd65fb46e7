from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.core.actors import Actor
from controlplane.metrics import services
from controlplane.metrics.api.serializers import (
    GroupMetricsSerializer,
    MetricsQuerySerializer,
    TopicMetricsSerializer,
)


def _query(request: Request) -> dict[str, Any]:
    serializer = MetricsQuerySerializer(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _actor(request: Request) -> Actor:
    assert isinstance(request.user, Actor)
    return request.user


class TopicMetricsView(APIView):
    """Rate history of a topic the caller may read (viewer or above in its tenant)."""

    @extend_schema(
        parameters=[MetricsQuerySerializer],
        responses=TopicMetricsSerializer,
        description=(
            "Produce rates (records/s, bytes/s) over [from, to), one point per step, from "
            "10-second points for the last hour or 1-minute points for 7 days. 400: "
            "'invalid_range' (from after to), 'invalid_step' (not a multiple of the "
            "tier's resolution), 'range_too_long'. 404: no such topic, or another tenant's."
        ),
    )
    def get(self, request: Request, name: str) -> Response:
        body = services.topic_metrics(_actor(request), name, **_query(request))
        return Response(TopicMetricsSerializer(body).data)


class GroupMetricsView(APIView):
    """Consume-rate and lag history of a consumer group the caller may read."""

    @extend_schema(
        parameters=[MetricsQuerySerializer],
        responses=GroupMetricsSerializer,
        description=(
            "Consume rate (records/s) and lag (records; seconds when brokers report it) "
            "per topic over [from, to), at the tiers and with the errors of the topic "
            "metrics. 404: a group never seen, or another tenant's."
        ),
    )
    def get(self, request: Request, group: str) -> Response:
        body = services.group_metrics(_actor(request), group, **_query(request))
        return Response(GroupMetricsSerializer(body).data)
