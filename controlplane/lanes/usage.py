"""What a tenant's lanes hold against its quota: the lanes app's ``UsageMeter``
(``controlplane.quotas.usage``), registered by ``LanesConfig.ready``. Lane topics are
topics rows and count for storage through the topics app's meter."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controlplane.lanes.models import Lane
from controlplane.tenants.models import Tenant


class LaneUsage:
    def reserved(self, tenant: Tenant) -> Mapping[str, int]:
        return {"lanes": Lane.objects.filter(tenant=tenant).count()}

    def stored_bytes(self, tenant_ids: Collection[int]) -> Mapping[int, int]:
        return {}
