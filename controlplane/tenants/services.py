"""Changing tenants. A tenant is created pending with the default quota; its identity
objects (the IdP group and role sub-groups) are provisioned by ``tenants.provision_tenant``
after commit, and removed by ``tenants.deprovision_tenant`` before its row goes (those
jobs' work is ``controlplane.tenants.lifecycle``)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import Conflict, InvalidRequest, NotFound
from controlplane.regions.models import Region
from controlplane.tenants import tasks
from controlplane.tenants.lifecycle import set_status
from controlplane.tenants.models import Tenant

_UNSET = object()


@transaction.atomic
def create_tenant(
    *,
    slug: str,
    name: str,
    home_region: Region | None = None,
    regions: Iterable[Region] = (),
    actor: Actor,
) -> Tenant:
    """A new tenant (status pending) with ``settings.DEFAULT_QUOTA`` (given by the quotas
    app, ``quotas.services.give_default_quota``); its IdP objects are
    provisioned after commit. ``regions``: the regions it may use besides its home
    region (mirror links). A slug in use is a ``Conflict``."""
    tenant = Tenant(slug=slug, name=name, home_region=home_region)
    tenant.full_clean(validate_unique=False)
    if Tenant.objects.filter(slug=slug).exists():
        raise Conflict(f"tenant {slug!r} already exists", slug=[f"{slug!r} is in use"])
    tenant.save()  # the quotas app gives it its quota in this transaction
    tenant.regions.set(_regions(regions))
    audit.record(actor, "tenant.create", tenant, after=audit.snapshot(tenant), tenant=tenant)
    _after_commit("provision_tenant", tenant.pk)
    return tenant


@transaction.atomic
def update_tenant(
    tenant: Tenant,
    *,
    actor: Actor,
    name: str | None = None,
    home_region: object = _UNSET,
    regions: Iterable[Region] | None = None,
) -> Tenant:
    """Rename the tenant, move its home region (``None`` clears it) or set the regions
    it may use besides it (``regions``, replacing them; mirror links already between
    regions it loses stay). The slug never changes: it is in every topic name."""
    tenant = Tenant.objects.select_for_update(no_key=True).get(pk=tenant.pk)  # see below
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
    if regions is not None:
        tenant.regions.set(_regions(regions))
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
    set_status(tenant, ProvisioningStatus.DELETING)
    audit.record(
        actor, "tenant.delete", tenant, before=before, after=audit.snapshot(tenant), tenant=tenant
    )
    _after_commit("deprovision_tenant", tenant.pk)
    return tenant


def lock_open_tenant(tenant: Tenant) -> Tenant:
    """The tenant's row, locked until the transaction ends; a ``Conflict`` if it is
    being deleted, ``NotFound`` if it is gone. Every create of a tenant-owned object
    calls it first, in the transaction that writes the object: ``delete_tenant`` takes
    the same lock, so a create and a delete of the tenant never interleave. The lock
    is Postgres' ``FOR NO KEY UPDATE``: rows written meanwhile that refer to the tenant
    (an audit event of a reconciler holding a topic's row) do not wait for it, so they
    never deadlock with a create waiting for that topic."""
    locked = Tenant.objects.select_for_update(no_key=True).filter(pk=tenant.pk).first()
    if locked is None:
        raise NotFound(f"tenant {tenant.slug!r} not found")
    _check_not_deleting(locked)
    return locked


def allowed_regions(tenant: Tenant) -> set[int]:
    """The ids of the regions the tenant may use: its home region and ``regions``."""
    allowed = set(tenant.regions.values_list("pk", flat=True))
    if tenant.home_region_id is not None:
        allowed.add(tenant.home_region_id)
    return allowed


def _regions(regions: Iterable[object]) -> list[Region]:
    chosen = list(regions)
    if not all(isinstance(region, Region) for region in chosen):
        raise InvalidRequest("regions: not a list of regions", regions=["not a list of regions"])
    return [region for region in chosen if isinstance(region, Region)]


def _check_not_deleting(tenant: Tenant) -> None:
    if tenant.status == ProvisioningStatus.DELETING:
        raise Conflict(f"tenant {tenant.slug!r} is being deleted", status=tenant.status)


def _after_commit(task_name: str, tenant_id: int) -> None:
    def enqueue() -> None:
        getattr(tasks, task_name).delay(tenant_id)

    # robust: a lost enqueue is logged, not a failed request (the change is committed);
    # tenants.reconcile_tenants picks the tenant up again.
    transaction.on_commit(enqueue, robust=True)
