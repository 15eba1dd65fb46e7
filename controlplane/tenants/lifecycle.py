"""A tenant's identity objects at the IdP, made and removed by the ``tenants.provision_tenant``
and ``tenants.deprovision_tenant`` jobs (``controlplane.tenants.tasks``) after
``services.create_tenant`` and ``services.delete_tenant`` commit; and the tenants whose
job stalled, which ``tenants.reconcile_tenants`` enqueues again. The IdP is reached
through ``tenant_identity()`` (``controlplane.tenants.identity``)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.tenants.identity import tenant_identity
from controlplane.tenants.models import Tenant

# Statuses from which provisioning may (re)start: a retry after a failure is allowed.
PROVISIONABLE = (ProvisioningStatus.PENDING, ProvisioningStatus.FAILED)


def provision_tenant(tenant_id: int, *, actor: Actor) -> Tenant | None:
    """Create the tenant's IdP objects and mark it ready (``identity_ref`` set), or
    failed with the reason; the error is re-raised so the task runner sees it. A tenant
    that is gone, ready or deleting is left alone (``None`` when gone)."""
    tenant, claimed = _claim_for_provisioning(tenant_id)
    if tenant is None or not claimed:
        return tenant
    try:
        ref = tenant_identity().provision_tenant(tenant)
    except Exception as exc:  # any failure is the tenant's status reason, then re-raised
        _finish(tenant, ProvisioningStatus.FAILED, actor, reason=f"identity provider: {exc}")
        raise
    return _finish(tenant, ProvisioningStatus.READY, actor, identity_ref=str(ref))


def deprovision_tenant(tenant_id: int, *, actor: Actor) -> bool:
    """Remove the IdP objects of a tenant marked deleting, then its row (its quota and
    memberships go with it; audit events keep its slug). ``False`` when there was
    nothing to do (gone, or not deleting)."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None or tenant.status != ProvisioningStatus.DELETING:
        return False
    tenant_identity().deprovision_tenant(tenant)
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().filter(pk=tenant_id).first()
        if tenant is None or tenant.status != ProvisioningStatus.DELETING:
            return False
        audit.record(
            actor, "tenant.deprovision", tenant, before=audit.snapshot(tenant), tenant=tenant
        )
        tenant.delete()
    return True


def stale_tenants() -> tuple[list[int], list[int]]:
    """Tenants whose job has not finished within a reconcile interval — its enqueue was
    lost (the Celery broker was down at commit) or its worker died mid-job: (ids to
    provision, ids to deprovision). Failed tenants are left for an operator to see."""
    cutoff = timezone.now() - timedelta(seconds=settings.RECONCILE_INTERVAL_S)
    waiting = Tenant.objects.filter(updated_at__lt=cutoff)
    to_provision = waiting.filter(
        status__in=[ProvisioningStatus.PENDING, ProvisioningStatus.PROVISIONING]
    )
    to_delete = waiting.filter(status=ProvisioningStatus.DELETING)
    return (
        list(to_provision.values_list("pk", flat=True)),
        list(to_delete.values_list("pk", flat=True)),
    )


def _claim_for_provisioning(tenant_id: int) -> tuple[Tenant | None, bool]:
    """Move a pending or failed tenant — or one stuck provisioning for longer than a
    reconcile interval — to provisioning, in its own transaction (the IdP call that
    follows is slow and must not hold a row lock). Returns the tenant and whether this
    caller claimed it: a tenant another worker is provisioning now is left to it."""
    cutoff = timezone.now() - timedelta(seconds=settings.RECONCILE_INTERVAL_S)
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().filter(pk=tenant_id).first()
        if tenant is None:
            return None, False
        stuck = tenant.status == ProvisioningStatus.PROVISIONING and tenant.updated_at < cutoff
        if tenant.status in PROVISIONABLE or stuck:
            set_status(tenant, ProvisioningStatus.PROVISIONING)
            return tenant, True
        return tenant, False


@transaction.atomic
def _finish(
    tenant: Tenant, status: str, actor: Actor, *, reason: str = "", identity_ref: str = ""
) -> Tenant:
    """Record the outcome of provisioning, unless the tenant moved on meanwhile (deleted,
    or marked deleting): only a provisioning tenant is updated."""
    current = Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    if current is None or current.status != ProvisioningStatus.PROVISIONING:
        return current or tenant
    before = audit.snapshot(current)
    if identity_ref:
        current.identity_ref = identity_ref
    set_status(current, status, reason)
    action = "tenant.provision" if status == ProvisioningStatus.READY else "tenant.provision_failed"
    audit.record(
        actor, action, current, before=before, after=audit.snapshot(current), tenant=current
    )
    return current


def set_status(tenant: Tenant, status: str, reason: str = "") -> None:
    tenant.status = status
    tenant.status_reason = reason
    tenant.save(update_fields=["status", "status_reason", "identity_ref", "updated_at"])
