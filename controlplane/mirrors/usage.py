"""What a tenant's mirror links hold against its quota: the mirrors app's ``UsageMeter``
(``controlplane.quotas.usage``), registered by ``MirrorsConfig.ready``. The target topics
a link creates are topics, counted by the topics app's meter."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controlplane.mirrors.models import MirrorLink
from controlplane.tenants.models import Tenant


class MirrorUsage:
    def reserved(self, tenant: Tenant) -> Mapping[str, int]:
        return {"mirrors": MirrorLink.objects.filter(tenant=tenant).count()}

    def stored_bytes(self, tenant_ids: Collection[int]) -> Mapping[int, int]:
        return {}  # the copies' bytes are their topics', which the topics meter counts
