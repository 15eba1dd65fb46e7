"""Which topics a link covers, and their copies in its target region.

A link covers the tenant's trunk *origin* topics (``mirror_of`` null) of its *source*
region named in ``topics``, or whose short name the glob ``topic_pattern`` matches
(``fnmatch.fnmatchcase``), and with ``include_lanes`` their lane topics. A copy in the
source region is never a source (naming one is ``SourceIsCopy``; a pattern never
matches one): records travel one hop, from their origin region. Each has a copy in the
*target* region (``topics.services.create_mirror_copy``), kept by the link and following its origin;
a two-way link copies records back into the source topics through the same pairs. A
copy in the target region the link did not make is refused (``TargetTopicExists``),
except a copy of the same origin no link keeps any more (a link deleted, then made
again): that one is taken over, and its records stay where they are."""

from __future__ import annotations

import fnmatch

from controlplane.core.actors import Actor
from controlplane.mirrors import progress
from controlplane.mirrors.models import MirrorLink
from controlplane.mirrors.rules import SourceIsCopy, TargetTopicExists, TopicNotFound
from controlplane.topics import acls
from controlplane.topics import services as topic_services
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import Topic


def source_topics(link: MirrorLink) -> list[Topic]:
    """The topics ``link`` covers in its source region: trunks by name, then (with
    ``include_lanes``) their lane topics. None being deleted."""
    live = (
        Topic.objects.tenant_facing()
        .filter(tenant_id=link.tenant_id, cluster__region_id=link.source_region_id)
        .exclude(status=TopicStatus.DELETING)
    )
    trunks = live.filter(trunk__isnull=True, mirror_of__isnull=True).select_related(
        "cluster__region"
    )
    if link.topics:
        chosen = list(trunks.filter(name__in=link.topics).order_by("name"))
    else:
        pattern = link.topic_pattern
        chosen = [t for t in trunks.order_by("name") if fnmatch.fnmatchcase(t.name, pattern)]
    if not link.include_lanes or not chosen:
        return chosen
    lanes = live.filter(trunk__in=chosen).select_related("cluster__region").order_by("name")
    return [*chosen, *lanes]


def check_named_topics(link: MirrorLink) -> None:
    """``SourceIsCopy`` for names of ``link.topics`` that are mirror copies in the
    source region, ``TopicNotFound`` for those that are not trunk topics of the tenant
    there."""
    found = {t.name for t in source_topics(link) if t.trunk_id is None}
    missing = [name for name in link.topics if name not in found]
    if not missing:
        return
    copies = set(
        Topic.objects.filter(
            tenant_id=link.tenant_id, cluster__region_id=link.source_region_id,
            trunk__isnull=True, mirror_of__isnull=False, name__in=missing,
        ).exclude(status=TopicStatus.DELETING).values_list("name", flat=True)
    )  # fmt: skip
    if copies:
        raise SourceIsCopy(link.source_region, sorted(copies))
    raise TopicNotFound(link.tenant, link.source_region, missing)


def ensure_copies(link: MirrorLink, *, actor: Actor) -> list[tuple[Topic, Topic]]:
    """Every covered topic's copy in the target region, made or brought in line with its
    origin (partitions grown, configuration copied); copies the link kept of topics it
    no longer covers are let go (they stay, as copies no link keeps) and the link's
    offset-map points and progress rows of topics without a live pair are deleted
    (``progress.forget_topics``); each copy gets its origin's ACL entries
    (``topics.acls.sync_copy_acls``). Returns the
    (source, copy) pairs. Raises ``TargetTopicExists``, ``QuotaExceeded`` and the
    topics app's refusals."""
    pairs = [(source, _ensure_copy(link, source, actor)) for source in source_topics(link)]
    topic_services.release_mirror_copies(link.pk, keep={copy.pk for _, copy in pairs}, actor=actor)
    for _, copy in pairs:
        acls.sync_copy_acls(copy, actor=actor)
    live = {copy.full_name for _, copy in pairs if copy.status != TopicStatus.DELETING}
    progress.forget_topics(link.pk, live)
    return pairs


def copies_converged(pairs: list[tuple[Topic, Topic]]) -> bool:
    """Whether every copy is on its brokers as desired (its reconcile caught up)."""
    return all(
        copy.status == TopicStatus.READY and copy.observed_generation == copy.generation
        for _, copy in pairs
    )


def _ensure_copy(link: MirrorLink, source: Topic, actor: Actor) -> Topic:
    existing = Topic.objects.filter(
        full_name=source.full_name, cluster__region_id=link.target_region_id
    ).first()
    if existing is None:
        return topic_services.create_mirror_copy(
            source, region=link.target_region, link_id=link.pk, actor=actor
        )
    origin_id = source.mirror_of_id or source.pk
    kept_here = existing.mirror_link_id == link.pk
    orphan = existing.mirror_link_id is None and existing.mirror_of_id == origin_id
    if existing.status != TopicStatus.DELETING and (kept_here or orphan):
        return topic_services.sync_mirror_copy(existing, actor=actor, link_id=link.pk)
    raise TargetTopicExists(existing, link.target_region)
