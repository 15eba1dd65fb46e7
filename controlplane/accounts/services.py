"""Members and service accounts: the control plane's rows and the IdP's objects change
together.

The IdP is called synchronously (the caller needs the secret back) and never left out of
step with the database: creating makes the IdP object first, then the row, and undoes
the IdP object if the transaction fails; deleting removes the row and, last inside the
same transaction, the IdP object, so an IdP failure rolls the row back. IdP failures are
``Unavailable`` (503) or ``Conflict`` (409)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib.auth.hashers import make_password
from django.db import IntegrityError, transaction
from django.db.models import Model

from controlplane.accounts.identity import get_identity
from controlplane.accounts.local import member_subject
from controlplane.accounts.models import LocalUser, ServiceAccount
from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus, Role
from controlplane.core.errors import Conflict, DomainError, InvalidRequest, NotFound
from controlplane.tenants.models import Membership, Tenant
from controlplane.tenants.services import lock_open_tenant

log = logging.getLogger(__name__)
T = TypeVar("T")
M = TypeVar("M", bound=Model)
CLIENT_ID_SEPARATOR = "--"
# Set by the IdP; uniqueness is the service's to check (a 409, not a 400).
_IDP_FIELDS = ["identity_ref", "secret_hash"]


class ManagedAccount(Conflict):
    """The account is a mirror link's worker identity: made, rotated and deleted with
    the link (``controlplane.mirrors.identity``), never by the tenant."""

    code = "managed_account"

    def __init__(self, account: ServiceAccount, doing: str) -> None:
        super().__init__(
            f"service account {account.name!r} is the worker identity of a mirror link: "
            f"it is {doing} with the link",
            managed_by_link=account.managed_by_link_id,
        )


def _check_unmanaged(account: ServiceAccount, doing: str, for_link: bool) -> None:
    if account.managed_by_link_id is not None and not for_link:
        raise ManagedAccount(account, doing)


def _check_role(role: str) -> None:
    if role not in Role.values:
        raise InvalidRequest(
            f"unknown role {role!r}; one of {', '.join(Role.values)}", role=f"unknown: {role}"
        )


def _then_undo(create: Callable[[], T], undo: Callable[[], None]) -> T:
    """``create()`` inside a transaction; if it fails, ``undo()`` the IdP change made
    before it (an undo failure is logged: the original error is what the caller sees)."""
    try:
        with transaction.atomic():
            return create()
    except BaseException:
        try:
            undo()
        except DomainError:
            log.exception("could not undo an IdP change after a failed transaction")
        raise


def _lock(model: type[M], pk: int) -> M:
    """The row ``pk``, locked until the transaction ends; ``NotFound`` if it is gone."""
    row = model._default_manager.select_for_update().filter(pk=pk).first()
    if row is None:
        raise NotFound(f"{model._meta.verbose_name} {pk} not found")
    return row


# -- members ------------------------------------------------------------------------------
def invite_member(
    tenant: Tenant, *, username: str, email: str = "", role: str, actor: Actor
) -> Membership:
    """Gives ``username`` the ``role`` in ``tenant``, creating the IdP user if missing
    (they verify their email and choose a password on first login). A person already a
    member, or a tenant being deleted, is a ``Conflict``."""
    _check_role(role)
    if Membership.objects.filter(tenant=tenant, username=username).exists():
        raise Conflict(f"{username!r} is already a member of {tenant.slug!r}", username=username)
    identity = get_identity()
    subject = identity.invite_member(tenant, username=username, email=email, role=role)

    def create() -> Membership:
        lock_open_tenant(tenant)
        try:
            with transaction.atomic():
                membership: Membership = Membership.objects.create(
                    tenant=tenant, subject=subject, username=username, email=email, role=role
                )
        except IntegrityError as exc:
            raise Conflict(f"{username!r} is already a member of {tenant.slug!r}") from exc
        audit.record(
            actor, "member.invite", membership, after=audit.snapshot(membership), tenant=tenant
        )
        return membership

    return _then_undo(create, lambda: identity.remove_member(tenant, subject=subject))


def change_member_role(membership: Membership, *, role: str, actor: Actor) -> Membership:
    """Moves the member to ``role`` in their tenant (the IdP first: tokens carry it)."""
    _check_role(role)
    if membership.role == role:
        return membership
    tenant, old_role = membership.tenant, membership.role
    identity = get_identity()
    identity.change_member_role(tenant, subject=membership.subject, role=role)

    def update() -> Membership:
        locked = _lock(Membership, membership.pk)
        before = audit.snapshot(locked)
        locked.role = role
        locked.save(update_fields=["role", "updated_at"])
        audit.record(
            actor, "member.change_role", locked, before=before,
            after=audit.snapshot(locked), tenant=tenant,
        )  # fmt: skip
        return locked

    def undo() -> None:
        identity.change_member_role(tenant, subject=membership.subject, role=old_role)

    return _then_undo(update, undo)


def remove_member(membership: Membership, *, actor: Actor) -> None:
    """Takes the member's role in the tenant away (the IdP user stays: they may belong
    to other tenants)."""
    tenant = membership.tenant
    # The IdP first, outside any transaction (no row lock is held through its HTTP
    # calls): if it fails nothing changed; if the row's delete then fails, the member
    # has lost access and a retried removal (idempotent at the IdP) finishes the job.
    get_identity().remove_member(tenant, subject=membership.subject)
    with transaction.atomic():
        audit.record(
            actor, "member.remove", membership, before=audit.snapshot(membership), tenant=tenant
        )
        membership.delete()


# -- service accounts ---------------------------------------------------------------------
def client_id_for(tenant: Tenant, name: str) -> str:
    return f"{tenant.slug}{CLIENT_ID_SEPARATOR}{name}"


def create_service_account(
    tenant: Tenant,
    *,
    name: str,
    role: str = Role.DEVELOPER,
    description: str = "",
    actor: Actor,
    managed_by_link_id: int | None = None,
) -> tuple[ServiceAccount, str]:
    """A machine identity of the tenant: an OAuth client ``<tenant>--<name>`` with the
    client-credentials grant and ``role`` in the tenant. Returns the account and its
    secret, which is shown this once. A name in use in the tenant, or a tenant being
    deleted, is a ``Conflict``. With ``managed_by_link_id``, the account is that mirror
    link's worker identity (``ManagedAccount``: the tenant cannot change it)."""
    _check_role(role)
    account = ServiceAccount(
        tenant=tenant,
        name=name,
        role=role,
        description=description,
        client_id=client_id_for(tenant, name),
        created_by=actor.subject,
        status=ProvisioningStatus.READY,
        managed_by_link_id=managed_by_link_id,
    )
    account.full_clean(exclude=_IDP_FIELDS, validate_unique=False, validate_constraints=False)
    # Neither slugs nor names contain the separator, so the client id names one
    # tenant's account: the name is checked in this tenant only.
    if ServiceAccount.objects.filter(tenant=tenant, name=name).exists():
        raise Conflict(f"service account {name!r} exists in {tenant.slug!r}", name=name)
    identity = get_identity()
    account.identity_ref, secret = identity.create_service_account(account)

    def create() -> ServiceAccount:
        lock_open_tenant(tenant)
        try:
            with transaction.atomic():
                account.save()
        except IntegrityError as exc:
            raise Conflict(f"service account {name!r} exists in {tenant.slug!r}") from exc
        audit.record(
            actor, "service_account.create", account, after=audit.snapshot(account), tenant=tenant
        )
        return account

    return _then_undo(create, lambda: identity.delete_service_account(account)), secret


def rotate_service_account_secret(
    account: ServiceAccount, *, actor: Actor, for_link: bool = False
) -> str:
    """A new secret for the account; the old one stops working. Returns the new one,
    shown this once. A mirror link's account only ``for_link`` (``ManagedAccount``)."""
    _check_unmanaged(account, "rotated", for_link)
    secret = get_identity().rotate_service_account_secret(account)
    with transaction.atomic():
        locked = _lock(ServiceAccount, account.pk)
        locked.secret_hash = account.secret_hash
        locked.save(update_fields=["secret_hash", "updated_at"])
        audit.record(
            actor, "service_account.rotate_secret", locked,
            after=audit.snapshot(locked), tenant=account.tenant,
        )  # fmt: skip
    return secret


def update_service_account(
    account: ServiceAccount, *, actor: Actor, **changes: Any
) -> ServiceAccount:
    """Changes ``description`` and/or ``role`` (the IdP first for a role); never a
    mirror link's account (``ManagedAccount``)."""
    _check_unmanaged(account, "changed", False)
    unknown = set(changes) - {"description", "role"}
    if unknown:
        raise InvalidRequest(f"cannot change {', '.join(sorted(unknown))}")
    old_role = account.role
    role = changes.get("role", old_role)
    _check_role(role)
    identity = get_identity()
    if role != old_role:
        identity.change_service_account_role(account, role)

    def update() -> ServiceAccount:
        locked = _lock(ServiceAccount, account.pk)
        before = audit.snapshot(locked)
        for field, value in changes.items():
            setattr(locked, field, value)
        locked.full_clean(exclude=_IDP_FIELDS, validate_unique=False, validate_constraints=False)
        locked.save(update_fields=[*changes, "updated_at"])
        audit.record(
            actor, "service_account.update", locked, before=before,
            after=audit.snapshot(locked), tenant=account.tenant,
        )  # fmt: skip
        return locked

    def undo() -> None:
        if role != old_role:
            account.role = old_role
            identity.change_service_account_role(account, old_role)

    return _then_undo(update, undo)


def delete_service_account(
    account: ServiceAccount, *, actor: Actor, for_link: bool = False
) -> None:
    """Removes the account and its IdP client. Its tokens already issued name the
    account's id: the API refuses them from now on, the brokers from the controller's
    next push. A mirror link's account only ``for_link`` (``ManagedAccount``)."""
    _check_unmanaged(account, "deleted", for_link)
    # The IdP first, outside any transaction, as in ``remove_member``.
    get_identity().delete_service_account(account)
    with transaction.atomic():
        audit.record(
            actor, "service_account.delete", account,
            before=audit.snapshot(account), tenant=account.tenant,
        )  # fmt: skip
        account.delete()


@transaction.atomic
def set_local_password(
    username: str, password: str, *, platform_admin: bool = False, actor: Actor
) -> LocalUser:
    """Creates the local issuer's user ``username`` (subject ``member_subject(username)``,
    the one its memberships name) or gives it a new password; only a Django password
    hash is kept."""
    if not username or not password:
        raise InvalidRequest("a local user needs a username and a password")
    before = LocalUser.objects.filter(username=username).first()
    user, _ = LocalUser.objects.update_or_create(
        username=username,
        defaults={
            "subject": member_subject(username),
            "password": make_password(password),
            "platform_admin": platform_admin,
        },
    )
    action = "local_user.set_password" if before else "local_user.create"
    audit.record(actor, action, user, after=audit.snapshot(user))
    return user
