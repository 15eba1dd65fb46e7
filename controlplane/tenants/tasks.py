"""Tenant jobs: thin wrappers that reload the tenant by id and call its lifecycle
(``controlplane.tenants.lifecycle``). Retried only when the identity provider is unavailable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from celery import shared_task

from controlplane.core.actors import Actor
from controlplane.core.errors import Unavailable
from controlplane.tenants import lifecycle


class RetryOptions(TypedDict):
    autoretry_for: Sequence[type[BaseException]]
    retry_backoff: bool
    max_retries: int


RETRY: RetryOptions = {"autoretry_for": (Unavailable,), "retry_backoff": True, "max_retries": 5}


@shared_task(name="tenants.provision_tenant", **RETRY)
def provision_tenant(tenant_id: int) -> None:
    lifecycle.provision_tenant(tenant_id, actor=Actor.system("tenants"))


@shared_task(name="tenants.deprovision_tenant", **RETRY)
def deprovision_tenant(tenant_id: int) -> None:
    lifecycle.deprovision_tenant(tenant_id, actor=Actor.system("tenants"))


@shared_task(name="tenants.reconcile_tenants")
def reconcile_tenants() -> dict[str, int]:
    """Periodic: enqueue again the tenants whose provisioning or deletion stalled."""
    to_provision, to_delete = lifecycle.stale_tenants()
    for tenant_id in to_provision:
        provision_tenant.delay(tenant_id)
    for tenant_id in to_delete:
        deprovision_tenant.delay(tenant_id)
    return {"provision": len(to_provision), "deprovision": len(to_delete)}
