"""What a tenant's indexes hold against its quota: the indexes app's ``UsageMeter``
(``controlplane.quotas.usage``), registered by ``IndexesConfig.ready``."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controlplane.indexes.models import Index
from controlplane.tenants.models import Tenant


class IndexUsage:
    def reserved(self, tenant: Tenant) -> Mapping[str, int]:
        return {"indexes": Index.objects.filter(tenant=tenant).count()}

    def stored_bytes(self, tenant_ids: Collection[int]) -> Mapping[int, int]:
        return {}
