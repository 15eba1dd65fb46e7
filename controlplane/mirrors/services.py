"""Changing a tenant's mirror links.

``create_link``, ``update_link`` and ``delete_link`` are atomic, take the acting
``Actor``, count against ``max_mirrors`` under the tenant's quota lock and write their
audit event (``mirror.create|update|delete``) in the same transaction. The copies in
the target region are made (or grown and reconfigured) in that transaction too
(``coverage.ensure_copies``), so a refusal leaves nothing behind. Refusals (400 unless
said; ``rules``): ``invalid`` (a field), ``same_region``, ``region_not_allowed``,
``topics_or_pattern``, ``invalid_pattern``, ``topic_not_found``, ``target_topic_exists``;
409 ``conflict`` (name in use, a link being deleted), ``quota_exceeded``
(``max_mirrors``, or the copies' partitions and storage).

Deleting marks the link ``deleting``: the controllers stop its workers, then
``finish_deletion`` removes its worker identities and its row. The copies stay, as
copies no link keeps, with their records.

What the controllers call: ``follow_origins(region)`` (copies follow their origins,
pattern links pick up new topics), ``workers.desired_workers(region)``,
``progress.record_status(worker, status)``, ``progress.evaluate_health(link)``,
``identity.worker_credentials(link, from_region)`` and ``finish_deletion(link)``
(``finish_deletions(region)``)."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import Conflict, DomainError, InvalidRequest, scrub_addresses
from controlplane.mirrors import coverage, identity, rules
from controlplane.mirrors.choices import Direction, MirrorHealth, StartPosition
from controlplane.mirrors.models import MirrorLink
from controlplane.quotas.services import check_count_quota
from controlplane.regions.models import Region
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics import services as topic_services

log = logging.getLogger(__name__)
FOLLOWER = identity.IDENTITY

UPDATABLE_FIELDS = (
    "topics", "topic_pattern", "include_lanes", "start_position", "start_timestamp_ms",
    "paused",
)  # fmt: skip


@transaction.atomic
def create_link(
    tenant: Tenant,
    *,
    name: str,
    source_region: Region | str,
    target_region: Region | str,
    direction: str = Direction.ONE_WAY,
    topics: list[str] | None = None,
    topic_pattern: str = "",
    include_lanes: bool = False,
    start_position: str = StartPosition.EARLIEST,
    start_timestamp_ms: int | None = None,
    paused: bool = False,
    actor: Actor,
) -> MirrorLink:
    """A new link ``name`` of ``tenant`` (status provisioning) with its copies made in
    the target region. Refusals: the module docstring."""
    tenant = lock_open_tenant(tenant)
    rules.check_name(name)
    source = rules.resolve_region(tenant, "source_region", source_region)
    target = rules.resolve_region(tenant, "target_region", target_region)
    rules.check_regions(source, target)
    topics = [] if topics is None else topics
    rules.check_selection(topics, topic_pattern)
    rules.check_choices(direction, start_position)
    start_timestamp_ms = _resolve_start(start_position, start_timestamp_ms)
    check_count_quota(tenant, "max_mirrors", 1)
    if MirrorLink.objects.filter(tenant=tenant, name=name).exists():
        raise _name_in_use(tenant, name)
    link = MirrorLink(
        tenant=tenant, name=name, source_region=source, target_region=target,
        direction=direction, topics=rules.short_names(tenant, topics),
        topic_pattern=topic_pattern, include_lanes=include_lanes,
        start_position=start_position, start_timestamp_ms=start_timestamp_ms, paused=paused,
        health=MirrorHealth.PAUSED if paused else MirrorHealth.STARTING,
        status=ProvisioningStatus.PROVISIONING, created_by=actor.name,
    )  # fmt: skip
    _full_clean(link)
    try:
        with transaction.atomic():
            link.save()
    except IntegrityError as exc:  # created concurrently since the check
        raise _name_in_use(tenant, name) from exc
    coverage.check_named_topics(link)
    coverage.ensure_copies(link, actor=actor)
    audit.record(actor, "mirror.create", link, after=snapshot(link), tenant=tenant)
    return link


@transaction.atomic
def update_link(link: MirrorLink, *, actor: Actor, **changes: Any) -> MirrorLink:
    """Change some of ``UPDATABLE_FIELDS``: pause or resume (``paused``), the topics
    (``topics`` or ``topic_pattern``: giving one clears the other), lanes, the start
    position (for partitions whose copy has not started yet). The regions, direction and
    name are the link's identity. Copies of newly covered topics are made; copies of
    topics no longer covered are let go (kept, as copies no link keeps). An unchanged
    link saves and audits nothing."""
    _check_known(changes)
    lock_open_tenant(link.tenant)
    link = _locked(link)
    if link.status == ProvisioningStatus.DELETING:
        raise Conflict(f"mirror link {link.name!r} is being deleted", status=link.status)
    before = snapshot(link)
    _apply_selection(link, changes)
    _apply_start(link, changes)
    for field, value in changes.items():
        setattr(link, field, value)
    rules.check_selection(link.topics, link.topic_pattern)
    rules.check_choices(link.direction, link.start_position)
    _full_clean(link)
    if snapshot(link) == before:
        return link
    if "paused" in changes and changes["paused"] != before["paused"]:
        _set_health(link, MirrorHealth.PAUSED if link.paused else MirrorHealth.STARTING, "")
    link.save()
    coverage.check_named_topics(link)
    coverage.ensure_copies(link, actor=actor)
    audit.record(actor, "mirror.update", link, before=before, after=snapshot(link),
                 tenant=link.tenant)  # fmt: skip
    return link


@transaction.atomic
def delete_link(link: MirrorLink, *, actor: Actor) -> MirrorLink:
    """Mark the link deleting: its workers stop (the controllers), then
    ``finish_deletion`` removes it. The copies stay, with their records. Deleting a
    link being deleted changes nothing."""
    link = _locked(link)
    if link.status == ProvisioningStatus.DELETING:
        return link
    before = snapshot(link)
    link.status = ProvisioningStatus.DELETING
    link.status_reason = "waiting for its workers to stop"
    link.save(update_fields=["status", "status_reason", "updated_at"])
    audit.record(actor, "mirror.delete", link, before=before, after=snapshot(link),
                 tenant=link.tenant)  # fmt: skip
    return link


def finish_deletion(link: MirrorLink, *, actor: Actor = FOLLOWER) -> bool:
    """Once a deleting link has no worker left (each controller deletes the
    ``MirrorWorker`` row of the worker it stopped), remove its worker identities (the
    IdP first, ``identity.delete_accounts``), let its copies go and delete its row.
    Returns whether the link is gone; False while a worker row remains (or the link is
    not being deleted)."""
    with transaction.atomic():
        found = MirrorLink.objects.select_for_update().filter(pk=link.pk).first()
        if found is None:
            return True
        if found.status != ProvisioningStatus.DELETING or found.workers.exists():
            return False
    identity.delete_accounts(link, actor=actor)
    with transaction.atomic():
        locked = MirrorLink.objects.select_for_update().filter(pk=link.pk).first()
        if locked is None:
            return True
        topic_services.release_mirror_copies(locked.pk, keep=set(), actor=actor)
        audit.record(actor, "mirror.deleted", locked, before=snapshot(locked),
                     tenant=locked.tenant)  # fmt: skip
        locked.delete()
    return True


def finish_deletions(region: Region | None = None, *, actor: Actor = FOLLOWER) -> int:
    """``finish_deletion`` of every deleting link with ``region`` on either side (every
    deleting link when None); returns how many are gone. A controller calls it on its
    tick after stopping the workers of deleting links that end in its region."""
    links = MirrorLink.objects.filter(status=ProvisioningStatus.DELETING)
    if region is not None:
        links = links.filter(Q(source_region=region) | Q(target_region=region))
    return sum(finish_deletion(link, actor=actor) for link in links.order_by("pk"))


def follow_origins(region: Region | None = None, *, actor: Actor = FOLLOWER) -> dict[str, int]:
    """For each live link whose target is ``region`` (every link when None): make the
    copies of topics it newly covers (a pattern matching a new topic, a new lane topic),
    grow and reconfigure copies behind their origins, and set the link's status:
    ``ready`` once every copy is on its brokers, ``provisioning`` before, ``failed``
    with the reason when a copy cannot be made (then retried on the next call). The
    controller of ``region`` calls it on its tick; ``topics.services.update_topic``
    already makes copies follow a change at once. Returns counts by outcome."""
    links = MirrorLink.objects.exclude(status=ProvisioningStatus.DELETING)
    if region is not None:
        links = links.filter(target_region=region)
    counts = {"ready": 0, "provisioning": 0, "failed": 0}
    for link_id in links.order_by("pk").values_list("pk", flat=True):
        counts[_follow(link_id, actor)] += 1
    return counts


def _follow(link_id: int, actor: Actor) -> str:
    try:
        with transaction.atomic():
            link = MirrorLink.objects.select_for_update().filter(pk=link_id).first()
            if link is None or link.status == ProvisioningStatus.DELETING:
                return "provisioning"
            pairs = coverage.ensure_copies(link, actor=actor)
            identity.sync_acls(link, actor=actor)
            converged = coverage.copies_converged(pairs)
            status = ProvisioningStatus.READY if converged else ProvisioningStatus.PROVISIONING
            _set_status(link, status, "")
            return str(status)
    except DomainError as exc:
        log.info("mirror link %s: copies not made: %s", link_id, exc)
        with transaction.atomic():
            link = MirrorLink.objects.select_for_update().filter(pk=link_id).first()
            if link is not None and link.status != ProvisioningStatus.DELETING:
                _set_status(link, ProvisioningStatus.FAILED, scrub_addresses(str(exc)))
        return "failed"


def snapshot(link: MirrorLink) -> dict[str, Any]:
    """The link for the audit log (its regions by name)."""
    data = audit.snapshot(link) or {}
    data["source_region"] = link.source_region.name
    data["target_region"] = link.target_region.name
    return {k: v for k, v in data.items() if k not in ("health", "health_reason",
                                                       "health_changed_at")}  # fmt: skip


def _set_status(link: MirrorLink, status: str, reason: str) -> None:
    if (link.status, link.status_reason) == (status, reason):
        return
    link.status, link.status_reason = status, reason
    link.save(update_fields=["status", "status_reason", "updated_at"])


def _set_health(link: MirrorLink, health: str, reason: str) -> None:
    link.health, link.health_reason = health, reason
    link.health_changed_at = timezone.now()


def _apply_selection(link: MirrorLink, changes: dict[str, Any]) -> None:
    """Naming topics clears the pattern and the other way round, unless both are given
    (then ``check_selection`` refuses them)."""
    if changes.get("topics") and "topic_pattern" not in changes:
        changes["topic_pattern"] = ""
    if changes.get("topic_pattern") and "topics" not in changes:
        changes["topics"] = []
    topics = changes.get("topics")
    if isinstance(topics, list) and all(isinstance(t, str) for t in topics):
        changes["topics"] = rules.short_names(link.tenant, topics)
    if changes.get("start_position") == StartPosition.EARLIEST:
        changes.setdefault("start_timestamp_ms", None)


def _apply_start(link: MirrorLink, changes: dict[str, Any]) -> None:
    """A link staying ``latest`` keeps the time it was resolved to; one set to
    ``latest`` is resolved anew (``_resolve_start``)."""
    if "start_position" not in changes and "start_timestamp_ms" not in changes:
        return
    position = changes.get("start_position", link.start_position)
    given = changes.get("start_timestamp_ms")
    if position == StartPosition.LATEST and link.start_position == StartPosition.LATEST:
        _resolve_start(position, given)  # refuses a timestamp given with latest
        changes.pop("start_timestamp_ms", None)
    else:
        changes["start_timestamp_ms"] = _resolve_start(position, given)


def _resolve_start(position: object, timestamp_ms: int | None) -> int | None:
    """The stored ``start_timestamp_ms`` of a start position: ``latest`` is resolved
    once, to now (ms), so every start of a worker (a paused link resumed, a worker
    replaced before its first copy) begins at the same point and records written
    meanwhile are copied; ``latest`` with a timestamp given is refused."""
    if position != StartPosition.LATEST:
        return timestamp_ms
    if timestamp_ms is not None:
        raise InvalidRequest(
            "start_timestamp_ms: only with start_position timestamp",
            start_timestamp_ms=["only with start_position timestamp"],
        )
    return int(timezone.now().timestamp() * 1000)


def _locked(link: MirrorLink) -> MirrorLink:
    return (
        MirrorLink.objects.select_for_update()
        .select_related("tenant", "source_region", "target_region")
        .get(pk=link.pk)
    )


def _full_clean(link: MirrorLink) -> None:
    """``MirrorLink.clean``'s refusals as ``InvalidRequest`` (``invalid``)."""
    try:
        link.full_clean(validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        details = exc.message_dict
        field, messages = next(iter(details.items()))
        raise InvalidRequest(f"{field}: {messages[0]}", **details) from None


def _check_known(changes: dict[str, Any]) -> None:
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: cannot be changed", **{f: ["cannot be changed"] for f in unknown}
        )


def _name_in_use(tenant: Tenant, name: str) -> Conflict:
    return Conflict(
        f"mirror link {name!r} already exists in tenant {tenant.slug!r}",
        name=[f"{name!r} is in use"],
    )
