"""Topic ACLs: which principals may do which operations on a topic.

Each function is atomic, takes the acting ``Actor`` and writes its audit event in the
same transaction. Nothing is sent to brokers from here: the controller pushes every
topic's entries (``MetadataTopic.acls``) on its next tick, and brokers enforce them.

A principal containing ``--`` is a service account's client id and must name an
account of the topic's tenant (else ``InvalidRequest``, the same whether or not another
tenant has such an account); any other principal is a user's subject, taken as given
(roles may come from the identity provider's groups without a member row here).

Deleting a service account leaves the entries naming it: revoking them could leave a
topic without entries, which would widen it to every role at once (the deleted
account's tokens included, until they expire). An account created later under the same
name is named by them again; revoke them first when that is not wanted.

``actor_may`` answers, as the brokers would for the actor's token, whether an actor may
do an operation on a topic: what the control plane does for someone on the brokers
(replaying dead letters) asks it first.

Mirror copies carry their origin's entries (``sync_copy_acls``): a topic restricted in
its origin region is restricted the same way wherever it is copied. Entries are
changed on the origin (a change there is applied to its copies at once, and the mirror
links' follow rounds apply it again); a copy's own entries other than its origin's are
removed, but for those of mirror workers' accounts (``managed_by_link``), which the
links keep (``mirrors.identity``)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError, transaction

from controlplane.accounts.models import ServiceAccount
from controlplane.accounts.services import CLIENT_ID_SEPARATOR
from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.errors import Conflict, InvalidRequest, NotFound
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics.choices import AclOperation, TopicStatus
from controlplane.topics.models import Topic, TopicAcl

# What each tenant role may do to a topic before its ACL entries (the brokers' rule).
_ROLE_OPERATIONS: dict[str, frozenset[str]] = {
    Role.TENANT_ADMIN: frozenset({AclOperation.PRODUCE, AclOperation.CONSUME, AclOperation.ADMIN}),
    Role.DEVELOPER: frozenset({AclOperation.PRODUCE, AclOperation.CONSUME}),
    Role.VIEWER: frozenset({AclOperation.CONSUME}),
}


def actor_may(actor: Actor, topic: Topic, operation: str) -> bool:
    """Whether ``actor`` may do ``operation`` (an ``AclOperation``) on ``topic``: its role
    in the topic's tenant allows it and, when the topic (a lane topic: its trunk) has ACL
    entries and the actor is no tenant admin, an entry naming its client id or subject
    allows it. The platform's own actors may do anything."""
    if actor.kind == "system":
        return True
    role = actor.role_in(topic.tenant.slug)
    if role is None or operation not in _ROLE_OPERATIONS.get(role, frozenset()):
        return False
    if role == Role.TENANT_ADMIN:
        return True
    entries = list(TopicAcl.objects.filter(topic_id=topic.trunk_id or topic.pk))
    if not entries:
        return True
    claims = actor.claims
    names = {actor.subject, str(claims.get("azp") or claims.get("client_id") or "")} - {""}
    return any(e.principal in names and operation in e.operations for e in entries)


@transaction.atomic
def grant_topic_acl(
    topic: Topic, *, principal: str, operations: Iterable[str], actor: Actor
) -> TopicAcl:
    """A new entry letting ``principal`` do ``operations`` on ``topic``. A bad
    principal or operation list is an ``InvalidRequest``; an entry for the principal
    already there, or a topic or tenant being deleted, a ``Conflict``."""
    lock_open_tenant(topic.tenant)
    topic = _lock_topic(topic)
    acl = TopicAcl(
        topic=topic, principal=principal, operations=list(operations), created_by=actor.name
    )
    acl.full_clean(validate_unique=False, validate_constraints=False)
    _check_principal(topic.tenant, principal)
    if TopicAcl.objects.filter(topic=topic, principal=principal).exists():
        raise _exists(topic, principal)
    acl.operations = canonical_operations(acl.operations)
    try:
        with transaction.atomic():
            acl.save()
    except IntegrityError as exc:
        raise _exists(topic, principal) from exc
    audit.record(actor, "topic_acl.grant", acl, after=audit.snapshot(acl), tenant=topic.tenant)
    _sync_copies(topic, actor)
    return acl


@transaction.atomic
def update_topic_acl(acl: TopicAcl, *, operations: Iterable[str], actor: Actor) -> TopicAcl:
    """Replaces the entry's operations (``InvalidRequest`` for a bad list)."""
    topic = _lock_topic(acl.topic)
    locked = TopicAcl.objects.select_for_update().filter(pk=acl.pk).first()
    if locked is None:
        raise NotFound(f"topic ACL {acl.pk} not found")
    before = audit.snapshot(locked)
    locked.operations = list(operations)
    locked.full_clean(validate_unique=False, validate_constraints=False)
    locked.operations = canonical_operations(locked.operations)
    locked.save(update_fields=["operations", "updated_at"])
    audit.record(
        actor, "topic_acl.update", locked, before=before,
        after=audit.snapshot(locked), tenant=topic.tenant,
    )  # fmt: skip
    _sync_copies(topic, actor)
    return locked


@transaction.atomic
def revoke_topic_acl(acl: TopicAcl, *, actor: Actor) -> None:
    """Removes the entry; when it was the topic's last, brokers fall back to roles."""
    tenant = acl.topic.tenant
    audit.record(actor, "topic_acl.revoke", acl, before=audit.snapshot(acl), tenant=tenant)
    acl.delete()
    _sync_copies(acl.topic, actor)


@transaction.atomic
def sync_copy_acls(copy: Topic, *, actor: Actor) -> int:
    """Give mirror copy ``copy`` its origin's entries (the module docstring): entries of
    mirror workers' accounts aside, the copy ends with the origin's principals and
    operations. Each change is audited; returns how many entries changed."""
    if copy.mirror_of_id is None:
        return 0
    workers = _worker_principals(copy.tenant_id)
    wanted = {a.principal: a.operations for a in TopicAcl.objects.filter(topic_id=copy.mirror_of_id)
              if a.principal not in workers}  # fmt: skip
    held = {a.principal: a for a in TopicAcl.objects.filter(topic=copy).select_related("topic")
            if a.principal not in workers}  # fmt: skip
    changed = 0
    for principal, entry in held.items():
        if principal not in wanted:
            audit.record(actor, "topic_acl.revoke", entry, before=audit.snapshot(entry),
                         tenant=copy.tenant)  # fmt: skip
            entry.delete()
            changed += 1
        elif entry.operations != wanted[principal]:
            before = audit.snapshot(entry)
            entry.operations = wanted[principal]
            entry.save(update_fields=["operations", "updated_at"])
            audit.record(actor, "topic_acl.update", entry, before=before,
                         after=audit.snapshot(entry), tenant=copy.tenant)  # fmt: skip
            changed += 1
    for principal in sorted(set(wanted) - set(held)):
        entry = TopicAcl.objects.create(
            topic=copy, principal=principal, operations=wanted[principal], created_by=actor.name
        )
        audit.record(actor, "topic_acl.grant", entry, after=audit.snapshot(entry),
                     tenant=copy.tenant)  # fmt: skip
        changed += 1
    return changed


def _sync_copies(topic: Topic, actor: Actor) -> None:
    """Apply an origin's entries to its live copies."""
    if topic.mirror_of_id is not None:
        return
    copies = Topic.objects.filter(mirror_of_id=topic.pk).exclude(status=TopicStatus.DELETING)
    for copy in copies.select_related("tenant").order_by("pk"):
        sync_copy_acls(copy, actor=actor)


def _worker_principals(tenant_id: int) -> set[str]:
    """Client ids of the tenant's mirror worker accounts (their entries are the links')."""
    return set(
        ServiceAccount.objects.filter(
            tenant_id=tenant_id, managed_by_link__isnull=False
        ).values_list("client_id", flat=True)
    )


def canonical_operations(operations: Iterable[str]) -> list[str]:
    """``operations`` in ``AclOperation`` order (a push then encodes the same bytes)."""
    given = set(operations)
    return [op for op in AclOperation.values if op in given]


def _lock_topic(topic: Topic) -> Topic:
    """The topic's row, locked until the transaction ends (a concurrent delete waits);
    a ``Conflict`` if it is being deleted."""
    locked = Topic.objects.select_for_update().select_related("tenant").get(pk=topic.pk)
    if locked.status == TopicStatus.DELETING:
        raise Conflict(f"topic {locked.full_name!r} is being deleted", status=locked.status)
    return locked


def _check_principal(tenant: Tenant, principal: str) -> None:
    if CLIENT_ID_SEPARATOR not in principal:
        return
    if not ServiceAccount.objects.filter(tenant=tenant, client_id=principal).exists():
        message = f"{principal!r} is not a service account of tenant {tenant.slug!r}"
        raise InvalidRequest(f"principal: {message}", principal=[message])


def _exists(topic: Topic, principal: str) -> Conflict:
    message = f"{principal!r} already has an entry on {topic.full_name!r}; change it instead"
    return Conflict(message, principal=[message])
