"""The life of a Spark job's run (``models.JobRun``: an export's run, an index's
build) and the progress figures shown with it.

A run is queued by a service (``request``), claimed by its Celery task under the
object's lock (``claim``: queued, or running but left behind by a worker that died,
since the lock proves nobody runs it now), and finished with the job's ``JobResult``
(``finish``). Conditional updates keep each step idempotent under redelivery. Deleting
the export or the index deletes its runs, also one whose job still runs: its outcome
then has no row to go to and is only logged.

Progress: ``covered`` (the latest succeeded run's, which is the job's committed
manifest) against the partitions' end offsets as their leaders last reported them
(``PartitionAssignment.log_end_offset``, which the controller keeps from the brokers'
``DescribeState``): ``lag`` per ``"<topic>/<partition>"`` in records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.core.errors import InvalidRequest
from controlplane.exports import jobs
from controlplane.exports.choices import RunState
from controlplane.exports.models import JobRun
from controlplane.exports.rules import check_topic_readable
from controlplane.topics.models import PartitionAssignment, Topic
from spark.jobs.spec import JobResult

R = TypeVar("R", bound=JobRun)
MAX_ERROR_CHARS = 8000

log = logging.getLogger(__name__)


def claim(runs: QuerySet[R], run_id: int, now: datetime) -> R | None:
    """Mark the run running; None if it has finished (a redelivered task)."""
    claimed = runs.filter(pk=run_id, state__in=(RunState.QUEUED, RunState.RUNNING)).update(
        state=RunState.RUNNING, started_at=now, finished_at=None, error=""
    )
    return runs.get(pk=run_id) if claimed else None


def run_claimed(
    runs: QuerySet[R],
    run_id: int,
    topic: Topic,
    include_lanes: bool,
    module: str,
    spec_json: Callable[[], str],
) -> R | None:
    """Claim the queued run ``run_id``, run job ``module`` on ``spec_json()`` (a failed
    run, not launched, when the topic stopped being readable) and record its end.
    None: the run is gone or was claimed already."""
    if claim(runs, run_id, now()) is None:
        return None
    try:
        check_topic_readable(topic)
    except InvalidRequest as refused:
        result = JobResult(status="failed", error=refused.message)
    else:
        result = jobs.run_job(module, spec_json(), timeout_s=settings.SPARK_JOB_TIMEOUT_S)
    return finish(runs, run_id, result, now(), end_offsets(topic, include_lanes))


def finish(
    runs: QuerySet[R], run_id: int, result: JobResult, now: datetime, ends: dict[str, int]
) -> R | None:
    """Record what the job answered and the lag it leaves against ``ends`` (the end
    offsets when it finished); a run already finished keeps its outcome. A failed job
    that names no coverage leaves the last committed one. None: the run is gone (its
    export or index was deleted while the job ran)."""
    succeeded = result.status == "succeeded"
    covered = _covered(result.covered) or ({} if succeeded else last_covered(runs))
    runs.filter(pk=run_id, state=RunState.RUNNING).update(
        state=RunState.SUCCEEDED if succeeded else RunState.FAILED,
        finished_at=now,
        manifest_version=max(result.manifest_version, 0),
        covered=covered,
        lag=lag(covered, ends),
        rows=max(result.rows, 0),
        bytes=max(result.bytes, 0),
        files=max(result.files, 0),
        dead_letter_rows=max(result.dead_letter_rows, 0),
        error="" if succeeded else (result.error or "the job failed")[:MAX_ERROR_CHARS],
    )
    finished = runs.filter(pk=run_id).first()
    if finished is None:
        log.info("run %s was deleted while its job ran; the job ended %s", run_id, result.status)
    return finished


def _covered(covered: Any) -> dict[str, int]:
    if not isinstance(covered, dict):
        return {}
    return {str(k): int(v) for k, v in covered.items() if isinstance(v, int)}


def fail_overdue(runs: QuerySet[R], older_than: timedelta, now: datetime) -> int:
    """Fail runs queued or running for longer than ``older_than`` (their task was lost:
    a run never lasts that long); returns how many."""
    cutoff = now - older_than
    overdue = runs.filter(state__in=(RunState.QUEUED, RunState.RUNNING)).filter(
        Q(started_at__lt=cutoff) | Q(started_at__isnull=True, queued_at__lt=cutoff)
    )
    return overdue.update(
        state=RunState.FAILED, finished_at=now, error="the run was lost (no worker finished it)"
    )


def last_covered(runs: QuerySet[R]) -> dict[str, int]:
    """What the latest succeeded run says the manifest covers (empty: nothing yet)."""
    latest = runs.filter(state=RunState.SUCCEEDED).order_by("-finished_at", "-pk").first()
    return dict(latest.covered) if latest is not None else {}


def end_offsets(topic: Topic, include_lanes: bool) -> dict[str, int]:
    """Per ``"<topic>/<partition>"``, the end offset its leader last reported, for the
    topic and (with ``include_lanes``) its lane topics."""
    topics = Q(topic=topic) | Q(topic__trunk=topic) if include_lanes else Q(topic=topic)
    rows = PartitionAssignment.objects.filter(topics).values_list(
        "topic__full_name", "partition", "log_end_offset"
    )
    return {f"{name}/{partition}": int(end) for name, partition, end in rows}


def lag(covered: dict[str, int], ends: dict[str, int]) -> dict[str, int]:
    """Records not yet covered, per partition."""
    return {key: max(0, end - covered.get(key, 0)) for key, end in sorted(ends.items())}


def progress(runs: QuerySet[R], topic: Topic, include_lanes: bool) -> dict[str, Any]:
    covered = last_covered(runs)
    per_partition = lag(covered, end_offsets(topic, include_lanes))
    return {
        "covered": covered,
        "lag": per_partition,
        "lag_records": sum(per_partition.values()),
    }


def now() -> datetime:
    return timezone.now()
