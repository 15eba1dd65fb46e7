"""What a tenant's exports hold against its quota: the exports app's ``UsageMeter``
(``controlplane.quotas.usage``), registered by ``ExportsConfig.ready``."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controlplane.exports.models import Export
from controlplane.tenants.models import Tenant


class ExportUsage:
    def reserved(self, tenant: Tenant) -> Mapping[str, int]:
        return {"exports": Export.objects.filter(tenant=tenant).count()}

    def stored_bytes(self, tenant_ids: Collection[int]) -> Mapping[int, int]:
        return {}  # the files are in the tenant's own target, not the platform's brokers
