"""The platform administrator's pages: regions, clusters and brokers (with decommission),
open drift findings, and tenants (create, quotas).

Only platform administrators reach them (``platform_page``: anyone else gets the 404 of
a missing page). Reads use the REST API's querysets (``RegionViewSet``,
``ClusterViewSet``, the topics app's ``BrokerViewSet``, ``DriftFindingViewSet``,
``TenantViewSet``, ``QuotaViewSet``); writes the API's serializers and services
(``reassignment.decommission_broker``, ``tenants.services.create_tenant``,
``quotas.services.set_quota``), so validation and audit are the API's. Broker
addresses are shown: these pages are operator-only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict
from controlplane.quotas import services as quota_services
from controlplane.quotas.api.serializers import QuotaUpdateSerializer
from controlplane.quotas.api.views import QuotaViewSet
from controlplane.quotas.models import Quota
from controlplane.quotas.services import LIMIT_FIELDS
from controlplane.regions.api.views import ClusterViewSet, RegionViewSet
from controlplane.regions.models import Broker, Cluster
from controlplane.tenants import services as tenant_services
from controlplane.tenants.api.serializers import TenantCreateSerializer
from controlplane.tenants.api.views import TenantViewSet
from controlplane.tenants.models import Tenant
from controlplane.topics import reassignment
from controlplane.topics.api.views import BrokerViewSet, DriftFindingViewSet
from controlplane.topics.models import DriftFinding, PartitionAssignment
from controlplane.topics.placement import broker_loads
from web.access import platform_page
from web.forms import NON_FIELD, FormState, submit, typed_confirmation

TENANT_FIELDS = ("slug", "name", "home_region")
TENANTS_PER_PAGE = 50


@dataclass(frozen=True)
class BrokerRow:
    broker: Broker
    hosted: int
    led: int
    size_bytes: int
    confirm: str  # what to type to decommission it
    form: FormState


@dataclass(frozen=True)
class ClusterRows:
    cluster: Cluster
    brokers: list[BrokerRow]
    drift: list[DriftFinding]


def _actor(request: HttpRequest) -> Actor:
    actor = request.actor  # type: ignore[attr-defined]
    assert isinstance(actor, Actor)
    return actor


# -- regions, clusters, brokers, drift ----------------------------------------------------


@platform_page
def overview(request: HttpRequest) -> HttpResponse:
    return _overview(request)


@platform_page
def broker_decommission(request: HttpRequest, broker: int) -> HttpResponse:
    """Decommission with the broker typed as confirmation (``<cluster>/<broker id>``):
    the REST API's ``POST /api/v1/brokers/{id}/decommission`` service, audited."""
    row = BrokerViewSet.queryset.filter(pk=broker).first()
    if row is None:
        raise Http404("no such broker")
    if request.method != "POST":
        return redirect("web:platform-overview")
    expected = _confirmation(row)
    state = typed_confirmation(
        request.POST, expected, f"type {expected} to decommission this broker"
    )
    if not state.ok:
        return _overview(request, decommission=(row.pk, state))
    try:
        reassignment.decommission_broker(row, actor=_actor(request))
    except Conflict as exc:
        state.errors = {NON_FIELD: [exc.message]}
        return _overview(request, decommission=(row.pk, state))
    return redirect("web:platform-overview")


def _confirmation(broker: Broker) -> str:
    return f"{broker.cluster.name}/{broker.broker_id}"


def _overview(
    request: HttpRequest, *, decommission: tuple[int, FormState] | None = None
) -> HttpResponse:
    clusters = list(ClusterViewSet.queryset.order_by("region__name", "name"))
    brokers = list(BrokerViewSet.queryset.order_by("cluster_id", "broker_id"))
    loads = {(b.cluster_id, load.broker_id): load for b, load in _loads(brokers)}
    led = _leaders(brokers)
    open_drift = DriftFindingViewSet.queryset.filter(resolved_at__isnull=True).order_by(
        "topic_name", "partition"
    )
    drift_by_cluster: dict[int, list[DriftFinding]] = {}
    for finding in open_drift:
        drift_by_cluster.setdefault(finding.broker.cluster_id, []).append(finding)
    forms = dict([decommission]) if decommission is not None else {}
    by_cluster: dict[int, list[BrokerRow]] = {}
    for b in brokers:
        load = loads.get((b.cluster_id, b.broker_id))
        by_cluster.setdefault(b.cluster_id, []).append(
            BrokerRow(
                broker=b,
                hosted=load.partitions if load else 0,
                led=led.get(b.pk, 0),
                size_bytes=load.size_bytes if load else 0,
                confirm=_confirmation(b),
                form=forms.get(b.pk) or FormState(fields=("confirm",)),
            )
        )
    regions = []
    for region in RegionViewSet.queryset.order_by("name"):
        rows = [
            ClusterRows(c, by_cluster.get(c.pk, []), drift_by_cluster.get(c.pk, []))
            for c in clusters
            if c.region_id == region.pk
        ]
        regions.append((region, rows))
    context = {
        "regions": regions,
        "drift_count": sum(len(v) for v in drift_by_cluster.values()),
    }
    failed = decommission is not None and decommission[1].errors
    return render(request, "web/platform/overview.html", context, status=422 if failed else 200)


def _loads(brokers: list[Broker]) -> list[tuple[Broker, Any]]:
    """Partitions hosted and bytes per broker (the placement's view of load), a cluster
    at a time: ``broker_loads`` reads one cluster's brokers."""
    out: list[tuple[Broker, Any]] = []
    by_cluster: dict[int, list[Broker]] = {}
    for b in brokers:
        by_cluster.setdefault(b.cluster_id, []).append(b)
    for members in by_cluster.values():
        out.extend(zip(members, broker_loads(members), strict=True))
    return out


def _leaders(brokers: list[Broker]) -> dict[int, int]:
    """Partitions each broker currently leads (the controller's ``leader``)."""
    rows = (
        PartitionAssignment.objects.filter(leader__in=[b.pk for b in brokers])
        .values("leader")
        .annotate(n=Count("id"))
    )
    return {row["leader"]: row["n"] for row in rows}


# -- tenants and quotas -------------------------------------------------------------------


@platform_page
def tenant_list(request: HttpRequest) -> HttpResponse:
    return _tenant_list(request)


@platform_page
def tenant_create(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("web:platform-tenant-list")
    state = FormState.from_post(request.POST, TENANT_FIELDS)
    created = submit(
        TenantCreateSerializer,
        state,
        lambda data: tenant_services.create_tenant(actor=_actor(request), **data),
    )
    if created is not None:
        return redirect("web:platform-tenant-detail", tenant=created.slug)
    return _tenant_list(request, create_form=state)


@platform_page
def tenant_detail(request: HttpRequest, tenant: str) -> HttpResponse:
    row = _tenant(tenant)
    quota = _quota(row)
    if request.method == "POST":
        state = FormState.from_post(request.POST, LIMIT_FIELDS)
        changed = submit(
            QuotaUpdateSerializer,
            state,
            lambda data: quota_services.set_quota(row, actor=_actor(request), **data),
            partial=True,
        )
        if changed is not None:
            return redirect("web:platform-tenant-detail", tenant=row.slug)
        return _tenant_page(request, row, quota, state)
    values = {name: str(getattr(quota, name)) for name in LIMIT_FIELDS}
    return _tenant_page(request, row, quota, FormState(fields=LIMIT_FIELDS, values=values))


def _tenant(slug: str) -> Tenant:
    row = TenantViewSet.queryset.filter(slug=slug).first()
    if row is None:
        raise Http404("no such tenant")
    return row


def _quota(tenant: Tenant) -> Quota:
    quota = QuotaViewSet.queryset.filter(tenant=tenant).first()
    if quota is None:
        raise Http404("no quota")
    return quota


def _tenant_page(
    request: HttpRequest, tenant: Tenant, quota: Quota, state: FormState
) -> HttpResponse:
    context = {
        "row": tenant,
        "quota": quota,
        "usage": quota_services.quota_usage(tenant),
        "quota_form": state,
        "limit_fields": LIMIT_FIELDS,
    }
    return render(request, "web/platform/tenant.html", context, status=422 if state.errors else 200)


def _tenant_list(request: HttpRequest, *, create_form: FormState | None = None) -> HttpResponse:
    tenants = TenantViewSet.queryset.annotate(
        member_count=Count("memberships", distinct=True),
        topic_count=Count("topics", distinct=True),
    ).order_by("slug")
    form = create_form or FormState(fields=TENANT_FIELDS)
    context = {
        "tenants": Paginator(tenants, TENANTS_PER_PAGE).get_page(request.GET.get("page")),
        "create_form": form,
        "region_choices": list(
            RegionViewSet.queryset.order_by("name").values_list("name", flat=True)
        ),
    }
    return render(request, "web/platform/tenants.html", context, status=422 if form.errors else 200)
