"""What a tenant uses against its quota, counted by the apps that own what is counted.

The quotas app sits below the apps whose objects consume quota (topics today; lanes and
mirrors next), so it cannot import them. Each such app registers a ``UsageMeter`` when
Django starts (``AppConfig.ready``); the quota rules (``services.check_topic_quota``,
``services.set_quota``) and the usage the API shows add up what the meters report.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from typing import Protocol

from controlplane.tenants.models import Tenant


class UsageMeter(Protocol):
    def reserved(self, tenant: Tenant) -> Mapping[str, int]:
        """What ``tenant``'s objects hold against count and storage limits, by usage name
        (``services.USAGE_OF_LIMIT``: ``topics``, ``partitions``, ``storage_bytes``)."""
        ...

    def stored_bytes(self, tenant_ids: Collection[int]) -> Mapping[int, int]:
        """Per tenant id, the bytes the brokers last reported its objects store (tenants
        storing nothing may be left out)."""
        ...


_meters: dict[str, UsageMeter] = {}
_lock = threading.Lock()


def register_meter(name: str, meter: UsageMeter) -> None:
    """Count ``meter``'s usage under ``name`` (the registering app's label); registering
    the same name again replaces it."""
    with _lock:
        _meters[name] = meter


def _registered() -> list[UsageMeter]:
    with _lock:
        return list(_meters.values())


def reserved_usage(tenant: Tenant) -> dict[str, int]:
    """What every meter reports ``tenant`` holds against its count and storage limits."""
    usage: dict[str, int] = {}
    for meter in _registered():
        for name, amount in meter.reserved(tenant).items():
            usage[name] = usage.get(name, 0) + amount
    return usage


def stored_bytes(tenant_ids: Collection[int]) -> dict[int, int]:
    """Per tenant id, the bytes every meter reports stored (0 for a tenant storing none)."""
    totals = dict.fromkeys(tenant_ids, 0)
    for meter in _registered():
        for tenant_id, amount in meter.stored_bytes(tenant_ids).items():
            totals[tenant_id] = totals.get(tenant_id, 0) + amount
    return totals
