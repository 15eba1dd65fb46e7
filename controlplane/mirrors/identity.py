"""The worker identity of a mirror link: one service account of the tenant per leg
(``mirror-<link id>-<from region id>``, ``ServiceAccount.managed_by_link``), made the
first time the leg's worker is started, deleted with the link, never changed or
deleted by the tenant (``accounts.services.ManagedAccount``).

The secret. The control plane keeps none in clear (the local issuer keeps its SHA-256
digest, Keycloak keeps it itself), so ``worker_credentials`` gives the leg's account a
**new** secret at every call: the controller calls it once per worker start, writes the
secret into that worker's private (0600) files, and the secret of the worker before it,
dead by then (fencing: a worker is proven dead before the next starts), stops working.
Every generation of a leg's worker so has its own secret. With the local issuer the new
digest replaces the old at once; with Keycloak the client's secret is regenerated
through the admin API (tokens already issued stay valid until they expire, as for any
rotation).

Role. The account holds the developer role in its tenant: the narrowest the brokers
let produce (``viewer`` only consumes). The API refuses its tokens
(``accounts.authentication.live_actor``), so the role counts at the brokers only; there
it reaches, besides the link's topics, every topic of the tenant without ACL entries.

ACLs. Entries on the link's
trunk topics (lane topics are authorized as their trunk): ``consume`` on the leg's
source topics, ``produce`` and ``consume`` on its target topics (the worker reads the
target's tail to resume). The brokers apply a topic's entries to every non-admin
caller once it has any, so an entry is kept only on topics that have entries of other
principals already: adding the first entry to a topic would take it away from every
other service account and member of the tenant. On a topic without entries, the
account is authorized by its role, as any of the tenant's developers."""

from __future__ import annotations

from django.db import transaction

from controlplane.accounts import services as accounts
from controlplane.accounts.models import ServiceAccount
from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.mirrors.models import MirrorLink
from controlplane.regions.models import Region
from controlplane.topics import acls
from controlplane.topics.choices import AclOperation, TopicStatus
from controlplane.topics.models import Topic, TopicAcl

IDENTITY = Actor.system("mirrors")
SOURCE_OPERATIONS = [AclOperation.CONSUME.value]
TARGET_OPERATIONS = [AclOperation.PRODUCE.value, AclOperation.CONSUME.value]


def account_name(link: MirrorLink, from_region_id: int) -> str:
    """The leg's account name (a slug: letters, digits, single dashes)."""
    return f"mirror-{link.pk}-{from_region_id}"


def worker_credentials(
    link: MirrorLink, from_region: Region | None = None, *, actor: Actor = IDENTITY
) -> tuple[str, str]:
    """``(client_id, client_secret)`` for the worker of the leg from ``from_region``
    (default: the link's source region, the forward leg): the leg's account, made if
    missing, with a new secret (the previous one stops working; see the module
    docstring) and its ACL entries brought up to date. Calls the IdP: not inside a
    transaction."""
    from_id = from_region.pk if from_region is not None else link.source_region_id
    name = account_name(link, from_id)
    account = ServiceAccount.objects.filter(managed_by_link=link, name=name).first()
    if account is None:
        to_id = link.target_region_id if from_id == link.source_region_id else link.source_region_id
        account, secret = accounts.create_service_account(
            link.tenant, name=name, role=Role.DEVELOPER, actor=actor,
            description=f"worker of mirror link {link.name} (region {from_id} to {to_id})",
            managed_by_link_id=link.pk,
        )  # fmt: skip
    else:
        secret = accounts.rotate_service_account_secret(account, actor=actor, for_link=True)
    sync_acls(link, actor=actor)
    return account.client_id, secret


def sync_acls(link: MirrorLink, *, actor: Actor = IDENTITY) -> None:
    """Give each of the link's accounts the entries its leg needs and no other (see the
    module docstring); an account not made yet gets none."""
    for account in ServiceAccount.objects.filter(managed_by_link=link).order_by("pk"):
        with transaction.atomic():
            _sync_account(link, account, _wanted(link, account), actor)


def delete_accounts(link: MirrorLink, *, actor: Actor = IDENTITY) -> None:
    """Delete the link's accounts (their entries first, then the IdP client and row)."""
    for account in ServiceAccount.objects.filter(managed_by_link=link).order_by("pk"):
        with transaction.atomic():
            _sync_account(link, account, {}, actor)
        accounts.delete_service_account(account, actor=actor, for_link=True)


def _wanted(link: MirrorLink, account: ServiceAccount) -> dict[int, list[str]]:
    """Per trunk topic id, the operations the account's leg needs there (none for an
    account whose leg the link no longer has)."""
    names = _covered_trunk_names(link)
    for from_id, to_id in link.legs:
        if account_name(link, from_id) != account.name:
            continue
        wanted: dict[int, list[str]] = {}
        for region_id, operations in ((from_id, SOURCE_OPERATIONS), (to_id, TARGET_OPERATIONS)):
            for topic_id in _trunks_in(link, region_id, names):
                wanted[topic_id] = sorted({*wanted.get(topic_id, []), *operations})
        return wanted
    return {}


def _covered_trunk_names(link: MirrorLink) -> set[str]:
    return set(
        Topic.objects.filter(mirror_link=link, trunk__isnull=True).values_list(
            "full_name", flat=True
        )
    )


def _trunks_in(link: MirrorLink, region_id: int, names: set[str]) -> list[int]:
    return list(
        Topic.objects.filter(
            tenant_id=link.tenant_id, cluster__region_id=region_id, full_name__in=names,
            trunk__isnull=True,
        )
        .exclude(status=TopicStatus.DELETING)
        .values_list("pk", flat=True)
    )  # fmt: skip


def _sync_account(
    link: MirrorLink, account: ServiceAccount, wanted: dict[int, list[str]], actor: Actor
) -> None:
    principal = account.client_id
    held = {a.topic_id: a for a in TopicAcl.objects.filter(principal=principal)}
    others = set(
        TopicAcl.objects.filter(topic_id__in=wanted)
        .exclude(principal=principal)
        .values_list("topic_id", flat=True)
    )
    for topic_id, stale in held.items():
        if topic_id not in others:
            acls.revoke_topic_acl(stale, actor=actor)
    for topic_id in sorted(others):
        operations = acls.canonical_operations(wanted[topic_id])
        entry = held.get(topic_id)
        if entry is None:
            topic = Topic.objects.select_related("tenant").get(pk=topic_id)
            acls.grant_topic_acl(topic, principal=principal, operations=operations, actor=actor)
        elif entry.operations != operations:
            acls.update_topic_acl(entry, operations=operations, actor=actor)
