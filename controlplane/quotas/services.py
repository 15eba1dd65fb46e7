"""A tenant's quota: giving a new tenant the default one, reading its usage, changing
its limits, the one check that count and storage quotas hold (DESIGN decision 8), and
the quotas pushed to a cluster's brokers, which enforce rates and refuse produce past
the storage quota."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest, QuotaExceeded
from controlplane.quotas import usage
from controlplane.quotas.models import Quota
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from dataplane._gen.meridian.v1 import admin_pb2

LIMIT_FIELDS = (
    "max_topics",
    "max_partitions",
    "max_storage_bytes",
    "produce_bytes_per_s",
    "fetch_bytes_per_s",
    "requests_per_s",
    "max_lanes",
    "max_mirrors",
    "max_exports",
    "max_indexes",
)
# Which usage figure each count/storage limit bounds.
USAGE_OF_LIMIT = {
    "max_topics": "topics",
    "max_partitions": "partitions",
    "max_storage_bytes": "storage_bytes",
    "max_lanes": "lanes",
    "max_mirrors": "mirrors",
    "max_exports": "exports",
    "max_indexes": "indexes",
}


def quota_usage(tenant: Tenant) -> dict[str, int]:
    """What the tenant holds against its count and storage limits (``usage``), plus
    ``stored_bytes``: what the brokers last reported it stores."""
    stored = usage.stored_bytes([tenant.pk])[tenant.pk]
    counted = dict.fromkeys(USAGE_OF_LIMIT.values(), 0)
    return {**counted, **usage.reserved_usage(tenant), "stored_bytes": stored}


def tenant_quotas(cluster: Cluster) -> list[admin_pb2.TenantQuota]:
    """The quotas to push to ``cluster``'s brokers (``UpdateMetadataRequest.quotas``): one
    per tenant with a topic on the cluster, by slug. Rates are copied (0 stays 0:
    unlimited, as the brokers read it); ``storage_exceeded`` is set when the bytes the
    brokers last reported for all the tenant's partitions, in every cluster, pass
    ``max_storage_bytes``, with a message naming the limit and the usage. A partition
    counts once (the one reported size of its assignment), not once per replica."""
    quotas = (
        Quota.objects.filter(tenant__topics__cluster=cluster)
        .select_related("tenant")
        .distinct()
        .order_by("tenant__slug")
    )
    stored = usage.stored_bytes([quota.tenant_id for quota in quotas])
    return [_tenant_quota(quota, stored[quota.tenant_id]) for quota in quotas]


def _tenant_quota(quota: Quota, stored_bytes: int) -> admin_pb2.TenantQuota:
    exceeded = stored_bytes > quota.max_storage_bytes
    message = (
        f"tenant {quota.tenant.slug!r} stores {stored_bytes} bytes, over its "
        f"max_storage_bytes quota of {quota.max_storage_bytes}: produce is refused until "
        "retention or deleted topics free space, or the quota is raised"
        if exceeded
        else ""
    )
    return admin_pb2.TenantQuota(
        tenant=quota.tenant.slug,
        produce_bytes_per_s=quota.produce_bytes_per_s,
        fetch_bytes_per_s=quota.fetch_bytes_per_s,
        requests_per_s=quota.requests_per_s,
        storage_exceeded=exceeded,
        storage_message=message,
    )


def lock_quota(tenant: Tenant) -> Quota:
    """The tenant's quota row, locked until the transaction ends: every change that
    consumes quota takes this lock first, so concurrent requests cannot overshoot."""
    return Quota.objects.select_for_update().get(tenant=tenant)


def check_topic_quota(
    tenant: Tenant, *, topics: int = 0, partitions: int = 0, storage_bytes: int = 0
) -> Quota:
    """Lock the quota and refuse (``QuotaExceeded`` naming the quota) when adding these
    amounts to the tenant's usage would pass a limit. Call inside the change's
    transaction, before writing it."""
    quota = lock_quota(tenant)
    used = usage.reserved_usage(tenant)
    for limit_field, requested in (
        ("max_topics", topics),
        ("max_partitions", partitions),
        ("max_storage_bytes", storage_bytes),
    ):
        limit = getattr(quota, limit_field)
        current = used[USAGE_OF_LIMIT[limit_field]]
        if requested > 0 and current + requested > limit:
            raise QuotaExceeded(limit_field, limit, requested, current)
    return quota


def check_lane_quota(tenant: Tenant, *, lanes: int = 1) -> Quota:
    """Lock the quota and refuse (``QuotaExceeded`` naming ``max_lanes``) when ``lanes``
    more lanes would pass the tenant's limit. Call inside the change's transaction."""
    return check_count_quota(tenant, "max_lanes", lanes)


def check_count_quota(tenant: Tenant, limit_field: str, requested: int = 1) -> Quota:
    """Lock the quota and refuse (``QuotaExceeded`` naming ``limit_field``, a count limit
    of ``USAGE_OF_LIMIT``: ``max_lanes``, ``max_exports``, ``max_indexes``) when
    ``requested`` more objects would pass the tenant's limit. Call inside the change's
    transaction, before writing it."""
    quota = lock_quota(tenant)
    current = usage.reserved_usage(tenant).get(USAGE_OF_LIMIT[limit_field], 0)
    limit = getattr(quota, limit_field)
    if requested > 0 and current + requested > limit:
        raise QuotaExceeded(limit_field, limit, requested, current)
    return quota


@transaction.atomic
def set_quota(tenant: Tenant, *, actor: Actor, **limits: int) -> Quota:
    """Change some of the tenant's limits. A count or storage limit below what the
    tenant already uses is refused (``Conflict`` naming the quota and the usage)."""
    _check_limit_values(limits)
    quota = lock_quota(tenant)
    before = audit.snapshot(quota)
    reserved = usage.reserved_usage(tenant)
    for limit_field, value in limits.items():
        used = reserved.get(USAGE_OF_LIMIT.get(limit_field, ""), 0)
        if limit_field in USAGE_OF_LIMIT and value < used:
            raise Conflict(
                f"{limit_field} cannot go below what tenant {tenant.slug!r} uses: "
                f"{used} in use, {value} asked",
                quota=limit_field,
                limit=value,
                current=used,
            )
        setattr(quota, limit_field, value)
    quota.full_clean()
    quota.save()
    audit.record(
        actor, "quota.update", quota, before=before, after=audit.snapshot(quota), tenant=tenant
    )
    return quota


def _check_limit_values(limits: dict[str, Any]) -> None:
    unknown = sorted(set(limits) - set(LIMIT_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"unknown quota field(s): {', '.join(unknown)}",
            **{f: ["unknown field"] for f in unknown},
        )
    bad = [f for f, v in limits.items() if not isinstance(v, int) or isinstance(v, bool) or v < 0]
    if bad:
        raise InvalidRequest(
            f"{bad[0]}: must be a non-negative integer",
            **{f: ["must be a non-negative integer"] for f in bad},
        )


def give_default_quota(
    sender: type[Tenant], instance: Tenant, created: bool, raw: bool = False, **_: Any
) -> None:
    """A new tenant's quota, ``settings.DEFAULT_QUOTA``, written in the transaction that
    writes the tenant (``post_save`` of ``Tenant``). Rows loaded raw (fixtures) bring
    their own."""
    if not created or raw:
        return
    quota = Quota(tenant=instance, **settings.DEFAULT_QUOTA)
    quota.full_clean()
    quota.save()
