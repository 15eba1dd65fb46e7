"""Drift: compare a cluster's brokers with the desired state, heal what can be healed.

``reconcile_cluster(cluster_id)`` asks every broker of the cluster for ``DescribeState``
first, then reads the desired state (reading it second means a partition created by a
concurrent ``reconcile_topic`` always has its row already). Per broker:

- a partition of a *converged* topic (ready at its generation) missing on its assigned
  broker is created again: ``DriftFinding(kind=missing, healed=True)``;
- one whose config differs from the topic's is altered: ``kind=config``, ``healed=True``;
- a partition no topic assigns to that broker (internal ``__`` topics aside) is reported
  as ``kind=unknown`` and left alone: deleting data is an operator's decision;
- what the broker reports (``size_bytes``, ``log_end_offset``) is copied onto the
  assignments, for quota usage and placement.

Topics still converging are not drift: their partitions may be half-made. A healed
finding is resolved at once; an open one that is not seen again gets ``resolved_at``.
A broker that does not answer is skipped (and listed in the report); the next pass
checks it. Topics whose desired state has not been made true for a while are listed in
``ClusterReport.stale_topic_ids`` so the caller can reconcile them again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.core.choices import ProvisioningStatus
from controlplane.regions.models import Broker, Cluster
from controlplane.topics import brokers
from controlplane.topics.brokers import BrokerRefusedError, BrokerUnavailable, DesiredConfig
from controlplane.topics.choices import DriftKind
from controlplane.topics.models import DriftFinding, PartitionAssignment, Topic
from controlplane.topics.placement import UNPLACEABLE_PHASES
from dataplane._gen.meridian.v1 import admin_pb2

log = logging.getLogger(__name__)

INTERNAL_PREFIX = "__"
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Finding:
    kind: str
    topic: str
    partition: int
    detail: str = ""
    healed: bool = False


@dataclass
class ClusterReport:
    """What one ``reconcile_cluster`` pass saw and did."""

    cluster_id: int
    brokers_checked: int = 0
    unreachable: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    resolved: int = 0
    stale_topic_ids: list[int] = field(default_factory=list)


@dataclass
class _Desired:
    """The desired state of one broker: every assignment on it, and the converged
    topics' partitions with their configs (the ones drift is judged against)."""

    assigned: dict[TopicPartition, PartitionAssignment] = field(default_factory=dict)
    converged: dict[TopicPartition, DesiredConfig] = field(default_factory=dict)


def reconcile_cluster(cluster_id: int) -> ClusterReport:
    """One drift pass over cluster ``cluster_id`` (see the module docstring). Never
    raises for a broker that does not answer."""
    report = ClusterReport(cluster_id)
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return report
    live = list(cluster.brokers.exclude(phase__in=UNPLACEABLE_PHASES).order_by("broker_id"))
    states = _describe_all(live, report)
    desired = _desired_state(cluster)
    for broker, state in states:
        _reconcile_broker(broker, state, desired.get(broker.pk, _Desired()), report)
    report.stale_topic_ids = stale_topic_ids(cluster)
    return report


def _describe_all(
    live: list[Broker], report: ClusterReport
) -> list[tuple[Broker, admin_pb2.DescribeStateResponse]]:
    states = []
    for broker in live:
        try:
            states.append((broker, brokers.describe_state(broker.address)))
        except BrokerUnavailable as exc:
            log.info("drift pass skips %s: %s", broker, exc)
            report.unreachable.append(str(broker))
    report.brokers_checked = len(states)
    return states


def _desired_state(cluster: Cluster) -> dict[int, _Desired]:
    """Per broker pk: what it should hold."""
    desired: dict[int, _Desired] = {}
    rows = PartitionAssignment.objects.filter(topic__cluster=cluster).select_related("topic")
    for row in rows:
        topic = row.topic
        entry = desired.setdefault(row.broker_id, _Desired())
        key = (topic.full_name, row.partition)
        entry.assigned[key] = row
        converged = (
            topic.status == ProvisioningStatus.READY
            and topic.observed_generation == topic.generation
        )
        if converged:
            entry.converged[key] = desired_config(topic)
    return desired


def desired_config(topic: Topic) -> DesiredConfig:
    """The partition config a topic's settings ask of its brokers."""
    return DesiredConfig(
        retention_ms=topic.retention_ms,
        retention_bytes=topic.retention_bytes,
        max_message_bytes=topic.max_message_bytes,
        durability=topic.durability,
    )


def _reconcile_broker(
    broker: Broker,
    state: admin_pb2.DescribeStateResponse,
    desired: _Desired,
    report: ClusterReport,
) -> None:
    actual = {
        (p.topic, p.partition): p
        for p in state.partitions
        if not p.topic.startswith(INTERNAL_PREFIX)
    }
    _copy_observed(desired, actual)
    findings = [
        *_heal(broker, desired, actual),
        *(
            Finding(DriftKind.UNKNOWN, t, p, _describe(actual[(t, p)]))
            for (t, p) in sorted(actual)
            if (t, p) not in desired.assigned
        ),
    ]
    report.findings.extend(findings)
    report.resolved += record_findings(broker, findings)


def _describe(state: admin_pb2.PartitionState) -> str:
    return f"size_bytes={state.size_bytes} log_end_offset={state.log_end_offset}"


def _copy_observed(
    desired: _Desired, actual: dict[TopicPartition, admin_pb2.PartitionState]
) -> None:
    now = timezone.now()
    rows = []
    for key, row in desired.assigned.items():
        state = actual.get(key)
        if state is None:
            continue
        row.size_bytes, row.log_end_offset, row.observed_at = (
            state.size_bytes,
            state.log_end_offset,
            now,
        )
        rows.append(row)
    PartitionAssignment.objects.bulk_update(rows, ["size_bytes", "log_end_offset", "observed_at"])


def _heal(
    broker: Broker,
    desired: _Desired,
    actual: dict[TopicPartition, admin_pb2.PartitionState],
) -> list[Finding]:
    """Create missing partitions and fix configs of converged topics on ``broker``."""
    wrong: dict[TopicPartition, str] = {}
    for key, config in desired.converged.items():
        state = actual.get(key)
        if state is None:
            wrong[key] = DriftKind.MISSING
        elif diff := config.differences(state.config):
            wrong[key] = DriftKind.CONFIG + ":" + ",".join(diff)
    if not wrong:
        return []
    specs = [brokers.spec(t, p, desired.converged[(t, p)]) for (t, p) in sorted(wrong)]
    try:
        changed = brokers.ensure_partitions(broker.address, specs)
        error = ""
    except (BrokerUnavailable, BrokerRefusedError) as exc:
        changed, error = set(), exc.message
    return [_finding(key, what, key in changed, error) for key, what in sorted(wrong.items())]


def _finding(key: TopicPartition, what: str, healed: bool, error: str) -> Finding:
    kind, _, fields = what.partition(":")
    detail = f"differs: {fields}" if fields else "missing on its broker"
    if error:
        detail += f"; not healed: {error}"
    return Finding(kind, key[0], key[1], detail, healed)


def record_findings(broker: Broker, findings: list[Finding]) -> int:
    """Open, refresh or resolve the broker's ``DriftFinding`` rows to match this pass.
    Returns how many open findings were resolved because they were not seen again."""
    now = timezone.now()
    with transaction.atomic():
        open_rows = {
            (f.topic_name, f.partition, f.kind): f
            for f in DriftFinding.objects.select_for_update().filter(
                broker=broker, resolved_at__isnull=True
            )
        }
        for finding in findings:
            _upsert(
                broker,
                open_rows.pop((finding.topic, finding.partition, finding.kind), None),
                finding,
                now,
            )
        gone = [row.pk for row in open_rows.values()]
        DriftFinding.objects.filter(pk__in=gone).update(resolved_at=now, updated_at=now)
    return len(gone)


def _upsert(broker: Broker, row: DriftFinding | None, finding: Finding, now: datetime) -> None:
    resolved_at = now if finding.healed else None
    if row is None:
        DriftFinding.objects.create(
            broker=broker,
            topic_name=finding.topic,
            partition=finding.partition,
            kind=finding.kind,
            detail=finding.detail,
            healed=finding.healed,
            last_seen_at=now,
            resolved_at=resolved_at,
        )
        return
    row.detail, row.healed, row.last_seen_at, row.resolved_at = (
        finding.detail,
        finding.healed,
        now,
        resolved_at,
    )
    row.save(update_fields=["detail", "healed", "last_seen_at", "resolved_at", "updated_at"])


def stale_topic_ids(cluster: Cluster) -> list[int]:
    """Topics of the cluster whose desired change has waited longer than a reconcile
    interval (a lost job, retries exhausted): pending, provisioning or deleting."""
    cutoff = timezone.now() - timedelta(seconds=settings.RECONCILE_INTERVAL_S)
    return list(
        Topic.objects.filter(
            cluster=cluster,
            status__in=[
                ProvisioningStatus.PENDING,
                ProvisioningStatus.PROVISIONING,
                ProvisioningStatus.DELETING,
            ],
            updated_at__lt=cutoff,
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
