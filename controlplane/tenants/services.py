"""Changing tenants. A tenant is created pending with the default quota; its identity
objects (the IdP group and role sub-groups) are provisioned by ``tenants.provision_tenant``
after commit, and removed by ``tenants.deprovision_tenant`` before its row goes."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import Conflict, InvalidRequest, NotFound
from controlplane.regions.models import Region
from controlplane.tenants.models import Tenant

_UNSET = object()
# Statuses from which provisioning may (re)start: a retry after a failure is allowed.
PROVISIONABLE = (ProvisioningStatus.PENDING, ProvisioningStatus.FAILED)


@transaction.atomic
def create_tenant(
    *, slug: str, name: str, home_region: Region | None = None, actor: Actor
) -> Tenant:
    """A new tenant (status pending) with ``settings.DEFAULT_QUOTA`` (given by the quotas
    app, ``quotas.services.give_default_quota``); its IdP objects are
    provisioned after commit. A slug in use is a ``Conflict``."""
    tenant = Tenant(slug=slug, name=name, home_region=home_region)
    tenant.full_clean(validate_unique=False)
    if Tenant.objects.filter(slug=slug).exists():
        raise Conflict(f"tenant {slug!r} already exists", slug=[f"{slug!r} is in use"])
    tenant.save()  # the quotas app gives it its quota in this transaction
    audit.record(actor, "tenant.create", tenant, after=audit.snapshot(tenant), tenant=tenant)
    _after_commit("provision_tenant", tenant.pk)
    return tenant


@transaction.atomic
def update_tenant(
    tenant: Tenant, *, actor: Actor, name: str | None = None, home_region: object = _UNSET
) -> Tenant:
    """Rename the tenant or move its home region (``None`` clears it). The slug never
    changes: it is in every topic name."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    _check_not_deleting(tenant)
    before = audit.snapshot(tenant)
    if name is not None:
        tenant.name = name
    if home_region is not _UNSET:
        if home_region is not None and not isinstance(home_region, Region):
            raise InvalidRequest("home_region: not a region", home_region=["not a region"])
        tenant.home_region = home_region
    tenant.full_clean()
    tenant.save()
    after = audit.snapshot(tenant)
    if after != before:
        audit.record(actor, "tenant.update", tenant, before=before, after=after, tenant=tenant)
    return tenant


@transaction.atomic
def delete_tenant(tenant: Tenant, *, actor: Actor) -> Tenant:
    """Mark the tenant deleting; after commit its IdP objects and then its row are
    removed. Refused (``Conflict``) while it still has topics or service accounts."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    if tenant.status == ProvisioningStatus.DELETING:
        return tenant
    topics = tenant.topics.count()
    accounts = tenant.service_accounts.count()
    if topics or accounts:
        raise Conflict(
            f"tenant {tenant.slug!r} still has {topics} topic(s) and {accounts} service "
            "account(s); delete them first",
            topics=topics,
            service_accounts=accounts,
        )
    before = audit.snapshot(tenant)
    _set_status(tenant, ProvisioningStatus.DELETING)
    audit.record(
        actor, "tenant.delete", tenant, before=before, after=audit.snapshot(tenant), tenant=tenant
    )
    _after_commit("deprovision_tenant", tenant.pk)
    return tenant


def lock_open_tenant(tenant: Tenant) -> Tenant:
    """The tenant's row, locked until the transaction ends; a ``Conflict`` if it is
    being deleted, ``NotFound`` if it is gone. Every create of a tenant-owned object
    calls it first, in the transaction that writes the object: ``delete_tenant`` takes
    the same lock, so a create and a delete of the tenant never interleave."""
    locked = Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    if locked is None:
        raise NotFound(f"tenant {tenant.slug!r} not found")
    _check_not_deleting(locked)
    return locked


def provision_tenant(tenant_id: int, *, actor: Actor) -> Tenant | None:
    """Create the tenant's IdP objects and mark it ready (``identity_ref`` set), or
    failed with the reason; the error is re-raised so the task runner sees it. A tenant
    that is gone, ready or deleting is left alone (``None`` when gone)."""
    from controlplane.accounts.identity import get_identity

    tenant, claimed = _claim_for_provisioning(tenant_id)
    if tenant is None or not claimed:
        return tenant
    try:
        ref = get_identity().provision_tenant(tenant)
    except Exception as exc:  # any failure is the tenant's status reason, then re-raised
        _finish(tenant, ProvisioningStatus.FAILED, actor, reason=f"identity provider: {exc}")
        raise
    return _finish(tenant, ProvisioningStatus.READY, actor, identity_ref=str(ref))


def deprovision_tenant(tenant_id: int, *, actor: Actor) -> bool:
    """Remove the IdP objects of a tenant marked deleting, then its row (its quota and
    memberships go with it; audit events keep its slug). ``False`` when there was
    nothing to do (gone, or not deleting)."""
    from controlplane.accounts.identity import get_identity

    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None or tenant.status != ProvisioningStatus.DELETING:
        return False
    get_identity().deprovision_tenant(tenant)
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
            _set_status(tenant, ProvisioningStatus.PROVISIONING)
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
    _set_status(current, status, reason)
    action = "tenant.provision" if status == ProvisioningStatus.READY else "tenant.provision_failed"
    audit.record(
        actor, action, current, before=before, after=audit.snapshot(current), tenant=current
    )
    return current


def _set_status(tenant: Tenant, status: str, reason: str = "") -> None:
    tenant.status = status
    tenant.status_reason = reason
    tenant.save(update_fields=["status", "status_reason", "identity_ref", "updated_at"])


def _check_not_deleting(tenant: Tenant) -> None:
    if tenant.status == ProvisioningStatus.DELETING:
        raise Conflict(f"tenant {tenant.slug!r} is being deleted", status=tenant.status)


def _after_commit(task_name: str, tenant_id: int) -> None:
    def enqueue() -> None:
        from controlplane.tenants import tasks

        getattr(tasks, task_name).delay(tenant_id)

    # robust: a lost enqueue is logged, not a failed request (the change is committed);
    # tenants.reconcile_tenants picks the tenant up again.
    transaction.on_commit(enqueue, robust=True)
