"""What each region's controller runs: one worker per leg of every live link whose leg
ends in that region (``desired_workers``), with the worker's config (the ``mirror/``
contract) but for what only the controller knows or may hold: the brokers' addresses
(``source``/``target``: the clusters are in the spec), the credentials
(``identity.worker_credentials``) and the ``generation`` of the start."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, Subquery

from controlplane.core.choices import ProvisioningStatus
from controlplane.mirrors.choices import StartPosition
from controlplane.mirrors.models import MirrorLink, MirrorOffsetPoint
from controlplane.regions.models import Region
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import Topic

# The keys of a worker config that do not restart a running worker when they change:
# the checkpoints move with every stored point (a new start reads them again), the
# generation and the secret-bearing parts are the controller's.
UNHASHED_KEYS = ("checkpoints", "generation", "source", "target", "credentials")


@dataclass(frozen=True)
class WorkerSpec:
    """One leg's worker: ``config`` is the worker's config file without ``generation``,
    ``source``, ``target`` and ``credentials`` (the controller adds them);
    ``source_cluster_id`` / ``target_cluster_id`` are the clusters whose brokers those
    name (the ones holding the leg's topics on each side; a leg whose topics span several
    clusters on one side is served for the topics of the first of them, see
    ``clusters``); ``config_hash`` is ``config_digest(config)``: a running worker whose
    hash differs is restarted."""

    link_id: int
    from_region: str
    to_region: str
    from_region_id: int
    to_region_id: int
    source_cluster_id: int | None
    target_cluster_id: int | None
    config: dict[str, Any] = field(hash=False)
    config_hash: str = ""


def desired_workers(region: Region | str) -> list[WorkerSpec]:
    """A spec per (link, leg) whose *to* region is ``region``, for links not paused and
    not being deleted, with at least one topic pair on its brokers."""
    region_id = region.pk if isinstance(region, Region) else Region.objects.get(name=region).pk
    links = (
        MirrorLink.objects.filter(paused=False)
        .exclude(status=ProvisioningStatus.DELETING)
        .select_related("tenant", "source_region", "target_region")
        .order_by("pk")
    )
    specs = []
    for link in links:
        for from_id, to_id in link.legs:
            if to_id == region_id:
                spec = worker_spec(link, from_id)
                if spec is not None:
                    specs.append(spec)
    return specs


def worker_spec(link: MirrorLink, from_region_id: int) -> WorkerSpec | None:
    """The spec of ``link``'s leg from ``from_region_id`` (None: nothing to copy yet)."""
    to_region_id = next(t for f, t in link.legs if f == from_region_id)
    regions = {link.source_region_id: link.source_region, link.target_region_id: link.target_region}
    pairs = leg_pairs(link, from_region_id, to_region_id)
    if not pairs:
        return None
    source_cluster = _majority(source.cluster_id for source, _ in pairs)
    target_cluster = _majority(target.cluster_id for _, target in pairs)
    pairs = [(s, t) for s, t in pairs
             if s.cluster_id == source_cluster and t.cluster_id == target_cluster]  # fmt: skip
    from_name, to_name = regions[from_region_id].name, regions[to_region_id].name
    config = {
        "link": f"{link.tenant.slug}/{link.name}",
        "link_id": link.pk,
        "from_region": from_name,
        "to_region": to_name,
        "topics": [
            {
                "source": s.full_name,
                "target": t.full_name,
                "partitions": list(range(min(s.partitions, t.partitions))),
            }
            for s, t in pairs
        ],
        "start": start_of(link),
        "checkpoints": checkpoints(link, from_region_id),
        "checkpoint_interval_ms": settings.MIRROR_CHECKPOINT_INTERVAL_MS,
        "batch": dict(settings.MIRROR_WORKER_BATCH),
    }
    return WorkerSpec(
        link_id=link.pk, from_region=from_name, to_region=to_name,
        from_region_id=from_region_id, to_region_id=to_region_id,
        source_cluster_id=source_cluster, target_cluster_id=target_cluster,
        config=config, config_hash=config_digest(config),
    )  # fmt: skip


def leg_pairs(link: MirrorLink, from_id: int, to_id: int) -> list[tuple[Topic, Topic]]:
    """(topic in ``from_id``, topic of that name in ``to_id``) for each topic the link
    keeps a copy of, both on their brokers (created there at least once) and neither
    being deleted."""
    copies = list(
        Topic.objects.filter(mirror_link=link).exclude(status=TopicStatus.DELETING).order_by("pk")
    )
    names = [c.full_name for c in copies]
    by_region: dict[int, dict[str, Topic]] = {from_id: {}, to_id: {}}
    live = (
        Topic.objects.filter(tenant_id=link.tenant_id, full_name__in=names,
                             cluster__region_id__in=[from_id, to_id], observed_generation__gt=0)
        .exclude(status=TopicStatus.DELETING)
        .select_related("cluster")
    )  # fmt: skip
    for topic in live:
        by_region[topic.cluster.region_id][topic.full_name] = topic
    return [
        (by_region[from_id][name], by_region[to_id][name])
        for name in sorted(set(names))
        if name in by_region[from_id] and name in by_region[to_id]
    ]


def start_of(link: MirrorLink) -> dict[str, Any]:
    """The worker's ``start``: ``latest`` was resolved to a time when it was set
    (``services``), so it starts every worker of the link at that same point."""
    resolved = link.start_position == StartPosition.LATEST and link.start_timestamp_ms is not None
    if link.start_position == StartPosition.TIMESTAMP or resolved:
        return {"position": "timestamp", "timestamp_ms": link.start_timestamp_ms}
    return {"position": str(link.start_position)}


def checkpoints(link: MirrorLink, from_region_id: int) -> dict[str, dict[str, int]]:
    """Per ``"<topic>/<partition>"``, the newest offset-map point of the leg."""
    rows = MirrorOffsetPoint.objects.filter(link=link, from_region_id=from_region_id)
    newest = rows.filter(topic=OuterRef("topic"), partition=OuterRef("partition"))
    points = rows.filter(
        source_offset=Subquery(newest.order_by("-source_offset").values("source_offset")[:1])
    )
    return {
        f"{p.topic}/{p.partition}": {
            "source_offset": p.source_offset,
            "target_offset": p.target_offset,
        }
        for p in points
    }


def config_digest(config: dict[str, Any]) -> str:
    """SHA-256 of the config's canonical JSON without ``UNHASHED_KEYS``."""
    kept = {k: v for k, v in config.items() if k not in UNHASHED_KEYS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def _majority(cluster_ids: Any) -> int | None:
    counted = Counter(cluster_ids).most_common()
    return min(cid for cid, n in counted if n == counted[0][1]) if counted else None
