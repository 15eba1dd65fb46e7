"""What the workers report, stored (``record_status``), and what it says of a link
(``evaluate_health``, ``totals``).

Health (per link, over its legs and their partitions): ``paused`` while the link is
paused; ``starting`` until every leg's worker has reported once (for at most
``MIRROR_STALL_S`` after the worker row appeared, or after the link became ready
when no worker row appears: then it is degraded); ``degraded``
with a reason when a worker's status has not been read for
``MIRROR_WORKER_TIMEOUT_S``, a partition has reported an error for more than
``MIRROR_STALL_S``, or a partition is behind (``lag_records`` > 0) and its
``next_source_offset`` has not moved for more than ``MIRROR_STALL_S``; ``ok``
otherwise (so a link recovers on its own)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Sum
from django.utils import timezone

from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import scrub_addresses
from controlplane.mirrors.choices import MirrorHealth, PartitionState
from controlplane.mirrors.models import MirrorLink, MirrorOffsetPoint, MirrorPartition, MirrorWorker
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import Topic

COUNTERS = (
    "next_source_offset", "source_end_offset", "source_log_start_offset", "target_end_offset",
    "lag_records", "copied_records", "copied_bytes", "skipped_records",
    "records_lost_to_retention",
)  # fmt: skip


@transaction.atomic
def record_status(
    worker: MirrorWorker, status: Mapping[str, Any], *, now: datetime | None = None
) -> bool:
    """Store a status document of ``worker``'s process (the ``mirror/`` contract): its
    partitions' progress (``MirrorPartition``; rows of partitions it no longer lists are
    dropped) and its offset-map points (``MirrorOffsetPoint``, deduplicated; the newest
    ``MIRROR_OFFSET_POINTS_KEPT`` per partition are kept), and the time it was read
    (``worker.last_status_at``). A status of another generation or link is not this
    worker's: nothing is stored and False is returned. Rows and points of topics the
    link keeps no copy of any more (released, deleted) are not stored: a status read
    before the worker was restarted without them must not bring them back
    (``forget_topics``). Error texts are stored without network addresses
    (``core.errors.scrub_addresses``): tenants read them."""
    now = now or timezone.now()
    if status.get("link_id") != worker.link_id or status.get("generation") != worker.generation:
        return False
    kept_topics = kept_copies(worker.link_id)
    rows = [
        p for p in status.get("partitions") or []
        if isinstance(p, Mapping) and str(p.get("source_topic", "")) in kept_topics
    ]  # fmt: skip
    kept = [_store_partition(worker, row, now) for row in rows]
    MirrorPartition.objects.filter(link_id=worker.link_id, from_region_id=worker.from_region_id
                                   ).exclude(pk__in=kept).delete()  # fmt: skip
    points = [p for p in status.get("points") or []
              if isinstance(p, Mapping) and str(p.get("topic", "")) in kept_topics]  # fmt: skip
    _store_points(worker, points)
    MirrorWorker.objects.filter(pk=worker.pk).update(last_status_at=now)
    worker.last_status_at = now
    return True


def kept_copies(link_id: int) -> set[str]:
    """Full names of the topics ``link_id`` keeps a live copy of."""
    return set(
        Topic.objects.filter(mirror_link_id=link_id)
        .exclude(status=TopicStatus.DELETING)
        .values_list("full_name", flat=True)
    )


def forget_topics(link_id: int, keep: set[str]) -> int:
    """Delete the offset-map points and progress rows of ``link_id`` (both legs) for
    topics not in ``keep`` (full names): a copy released, deleted, or whose topic was
    deleted and made again must not resume from, nor start a failover scan at, a point
    of the topic it was before. Returns how many rows went."""
    points = MirrorOffsetPoint.objects.filter(link_id=link_id).exclude(topic__in=keep)
    parts = MirrorPartition.objects.filter(link_id=link_id).exclude(source_topic__in=keep)
    return points.delete()[0] + parts.delete()[0]


def _store_partition(worker: MirrorWorker, row: Mapping[str, Any], now: datetime) -> int:
    key = {
        "link_id": worker.link_id,
        "from_region_id": worker.from_region_id,
        "source_topic": str(row.get("source_topic", "")),
        "partition": int(row.get("partition", 0)),
    }
    found = MirrorPartition.objects.select_for_update().filter(**key).first()
    part = found or MirrorPartition(**key, to_region_id=worker.to_region_id, progress_at=now)
    moved = found is not None and int(row.get("next_source_offset", 0)) != part.next_source_offset
    for name in COUNTERS:
        setattr(part, name, int(row.get(name) or 0))
    part.target_topic = str(row.get("target_topic") or key["source_topic"])
    state = row.get("state")
    if state in PartitionState.values:
        part.state = str(state)
    part.lag_seconds = float(row.get("lag_seconds") or 0.0)
    part.error = scrub_addresses(str(row.get("error") or ""))
    part.error_since = _error_since(part, row, now)
    if moved:
        part.progress_at = now
    part.save()
    return part.pk


def _error_since(part: MirrorPartition, row: Mapping[str, Any], now: datetime) -> datetime | None:
    if not part.error:
        return None
    since_ms = row.get("error_since_ms")
    if isinstance(since_ms, int | float) and since_ms > 0:
        return datetime.fromtimestamp(since_ms / 1000, tz=UTC)
    return part.error_since or now


def _store_points(worker: MirrorWorker, points: list[Mapping[str, Any]]) -> None:
    new = [
        MirrorOffsetPoint(
            link_id=worker.link_id,
            from_region_id=worker.from_region_id,
            topic=str(p.get("topic", "")),
            partition=int(p.get("partition", 0)),
            source_offset=int(p.get("source_offset", 0)),
            target_offset=int(p.get("target_offset", 0)),
        )
        for p in points
    ]
    if not new:
        return
    MirrorOffsetPoint.objects.bulk_create(new, ignore_conflicts=True)
    for topic, partition in sorted({(p.topic, p.partition) for p in new}):
        _prune(worker, topic, partition)


def _prune(worker: MirrorWorker, topic: str, partition: int) -> None:
    rows = MirrorOffsetPoint.objects.filter(
        link_id=worker.link_id, from_region_id=worker.from_region_id, topic=topic,
        partition=partition,
    )  # fmt: skip
    kept = settings.MIRROR_OFFSET_POINTS_KEPT
    oldest_kept = rows.order_by("-source_offset").values_list("source_offset", flat=True)[
        kept - 1 : kept
    ]
    if oldest_kept:
        rows.filter(source_offset__lt=oldest_kept[0]).delete()


# -- health ---------------------------------------------------------------------------
def evaluate_health(link: MirrorLink, *, now: datetime | None = None) -> MirrorLink:
    """Set ``link.health`` and ``health_reason`` from its workers and partitions (the
    module docstring) and save them when they changed. Returns the link."""
    now = now or timezone.now()
    health, reason = _health(link, now)
    if (health, reason) != (link.health, link.health_reason):
        link.health, link.health_reason, link.health_changed_at = health, reason, now
        MirrorLink.objects.filter(pk=link.pk).update(
            health=health, health_reason=reason, health_changed_at=now
        )
    return link


def _health(link: MirrorLink, now: datetime) -> tuple[str, str]:
    if link.paused:
        return MirrorHealth.PAUSED, ""
    stall = timedelta(seconds=settings.MIRROR_STALL_S)
    timeout = timedelta(seconds=settings.MIRROR_WORKER_TIMEOUT_S)
    workers = {w.from_region_id: w for w in link.workers.select_related("from_region", "to_region")}
    waiting = []
    for from_id, _ in link.legs:
        worker = workers.get(from_id)
        if worker is None and link.status != ProvisioningStatus.READY:
            waiting.append(from_id)  # its copies are being made: no worker yet
        elif worker is None or worker.last_status_at is None:
            since = worker.created_at if worker is not None else link.updated_at
            if now - since > stall:
                where = worker.to_region.name if worker else "its region"
                return MirrorHealth.DEGRADED, f"the worker in {where} has not reported yet"
            waiting.append(from_id)
        elif now - worker.last_status_at > timeout:
            seconds = int((now - worker.last_status_at).total_seconds())
            return MirrorHealth.DEGRADED, (
                f"the status of the worker in {worker.to_region.name} has not been read "
                f"for {seconds} s"
            )
    problem = _partition_problem(link, now, stall)
    if problem:
        return MirrorHealth.DEGRADED, problem
    return (MirrorHealth.STARTING, "") if waiting else (MirrorHealth.OK, "")


def _partition_problem(link: MirrorLink, now: datetime, stall: timedelta) -> str:
    rows = link.partitions.select_related("from_region", "to_region").order_by(
        "from_region", "source_topic", "partition"
    )
    for row in rows:
        where = (
            f"{row.source_topic}/{row.partition} ({row.from_region.name} to {row.to_region.name})"
        )
        if row.error and row.error_since is not None and now - row.error_since > stall:
            return f"{where}: {row.error} (since {row.error_since:%Y-%m-%d %H:%M:%S} UTC)"
        if row.lag_records > 0 and row.progress_at is not None and now - row.progress_at > stall:
            seconds = int((now - row.progress_at).total_seconds())
            return f"{where}: {row.lag_records} records behind, no progress for {seconds} s"
    return ""


def totals(rows: Iterable[MirrorPartition] | None = None, *, link: MirrorLink | None = None
           ) -> dict[str, float]:  # fmt: skip
    """``lag_records`` (sum) and ``lag_seconds`` (max) over the rows, or the link's."""
    if link is not None:
        found = link.partitions.aggregate(
            records=Sum("lag_records", default=0), seconds=Max("lag_seconds", default=0.0)
        )
        return {"lag_records": found["records"], "lag_seconds": found["seconds"]}
    listed = list(rows or [])
    return {
        "lag_records": sum(r.lag_records for r in listed),
        "lag_seconds": max((r.lag_seconds for r in listed), default=0.0),
    }
