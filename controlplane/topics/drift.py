"""Drift: compare a cluster's brokers with the desired state, heal what can be healed.

``reconcile_cluster(cluster_id)`` asks every broker of the cluster for ``DescribeState``
first, then reads the desired state (reading it second means a partition created by a
concurrent ``reconcile_topic`` always has its row already). Per broker:

- a partition of a *converged* topic (ready at its generation) missing on one of its
  replicas' brokers is created again: ``DriftFinding(kind=missing, healed=True)``;
- one whose config differs from the topic's is altered: ``kind=config``, ``healed=True``;
- a partition no topic assigns to that broker (internal ``__`` topics aside) is reported
  as ``kind=unknown`` and left alone: deleting data is an operator's decision;
- a replica whose role (leader, follower, offline) or leader epoch is not the
  controller's is reported as ``kind=role``: the controller's pushes correct it;
- a partition whose ``topic_id`` on the broker is another one (a broker keeps the first
  id it is given) is reported as ``kind=identity`` and its config healed without the
  id; a partition without an id gets the topic's (topics made before ids were sent).
  A broker that refuses an id is reported the same way, and the id is not sent again
  by a drift pass while that finding is open (a reconcile run of the topic, after a
  change, sends it again): a refusal never turns into a retry at every pass;
- a partition tiered on the broker (``remote_storage``) whose topic is not is reported
  as ``kind=remote_storage``: brokers never turn tiering off, so its other settings are
  healed with tiering left on;
- a leader whose oldest sealed segment has waited for its upload to the object store
  longer than ``settings.TIER_UPLOAD_LAG_FINDING_MS`` is reported as ``kind=upload_lag``:
  the store may be unreachable, and local retention waits for the upload;
- what the partition's leader reports (``size_bytes``, ``remote_bytes``,
  ``log_end_offset``) is copied onto the assignments, for quota usage, placement and
  the topic's local and remote sizes.

Topics still converging are not drift: their partitions may be half-made; but a
partition a topic refused to adopt (``reconcile._strangers``: an open ``unknown``
finding on an assignment never confirmed) is reported again as long as it is there. A
healed finding is resolved at once; an open one that is not seen again gets
``resolved_at``.

A heal takes the topic's lock (``controlplane.topics.locks``), re-reads the topic under
it and heals only if it is still converged at the generation the pass judged: a
reconcile run of the topic (a delete, a newer generation) is never raced. A topic whose
lock stays busy is not healed in this pass.
A broker that does not answer is skipped (and listed in the report); the next pass
checks it. Topics whose desired state has not been made true for a while are listed in
``ClusterReport.stale_topic_ids`` so the caller can reconcile them again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.core.choices import ProvisioningStatus
from controlplane.gateway import admin as brokers
from controlplane.gateway.admin import DesiredConfig
from controlplane.gateway.errors import BrokerRefusedError, BrokerUnavailable
from controlplane.regions.models import Broker, Cluster
from controlplane.topics.choices import DriftKind
from controlplane.topics.locks import TopicBusy, topic_lock
from controlplane.topics.models import DriftFinding, PartitionAssignment, Topic
from controlplane.topics.placement import UNPLACEABLE_PHASES
from dataplane._gen.meridian.v1 import admin_pb2

log = logging.getLogger(__name__)

INTERNAL_PREFIX = "__"
TopicPartition = tuple[str, int]
# The longest wait between two retries of ``topics.reconcile_topic`` (its
# ``retry_backoff_max``): a topic untouched for less than that may still be retrying.
RETRY_BACKOFF_MAX_S = 60
# How long a heal waits for a reconcile run of the topic before leaving it to a later pass.
HEAL_LOCK_WAIT_S = 1.0


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


@dataclass(frozen=True)
class _Want:
    """A converged topic's partition as the pass judged it: at ``generation``."""

    topic_id: int
    generation: int
    config: DesiredConfig


@dataclass
class _Desired:
    """The desired state of one broker: every assignment on it, and the converged
    topics' partitions with their configs (the ones drift is judged against)."""

    assigned: dict[TopicPartition, PartitionAssignment] = field(default_factory=dict)
    converged: dict[TopicPartition, _Want] = field(default_factory=dict)


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
    """Per broker pk: what it should hold (every replica of every partition)."""
    desired: dict[int, _Desired] = {}
    pk_of = dict(Broker.objects.filter(cluster=cluster).values_list("broker_id", "pk"))
    rows = PartitionAssignment.objects.filter(topic__cluster=cluster).select_related("topic")
    for row in rows:
        topic = row.topic
        key = (topic.full_name, row.partition)
        converged = (
            topic.status == ProvisioningStatus.READY
            and topic.observed_generation == topic.generation
        )
        for broker_id in row.replicas:
            if broker_id not in pk_of:
                continue
            entry = desired.setdefault(pk_of[broker_id], _Desired())
            entry.assigned[key] = row
            if converged:
                entry.converged[key] = _Want(topic.pk, topic.generation, desired_config(topic))
    return desired


def desired_config(topic: Topic) -> DesiredConfig:
    """The partition config a topic's settings ask of its brokers."""
    return DesiredConfig(
        retention_ms=topic.retention_ms,
        retention_bytes=topic.retention_bytes,
        max_message_bytes=topic.max_message_bytes,
        durability=topic.durability,
        remote_storage=topic.remote_storage,
        local_retention_ms=topic.local_retention_ms,
        local_retention_bytes=topic.local_retention_bytes,
        max_segment_bytes=topic.max_segment_bytes,
        segment_ms=topic.segment_ms,
        topic_id=str(topic.pk),
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
    _copy_observed(broker, desired, actual)
    findings = [
        *_heal(broker, desired, actual),
        *(
            Finding(DriftKind.UNKNOWN, t, p, _describe(actual[(t, p)]))
            for (t, p) in sorted(actual)
            if (t, p) not in desired.assigned
        ),
        *_refused(broker, desired, actual),
        *_roles(broker, desired, actual),
        *_upload_lag(broker, desired, actual),
    ]
    report.findings.extend(findings)
    report.resolved += record_findings(broker, findings)


def _refused(
    broker: Broker,
    desired: _Desired,
    actual: dict[TopicPartition, admin_pb2.PartitionState],
) -> list[Finding]:
    """Partitions assigned to a topic that refused to adopt them (an open ``unknown``
    finding on an assignment its broker never confirmed), still on the broker."""
    unconfirmed = {
        key
        for key, row in desired.assigned.items()
        if key in actual
        and key not in desired.converged
        and row.status in (ProvisioningStatus.PENDING, ProvisioningStatus.FAILED)
    }
    if not unconfirmed:
        return []
    rows = DriftFinding.objects.filter(
        broker=broker, kind=DriftKind.UNKNOWN, resolved_at__isnull=True
    ).values_list("topic_name", "partition", "detail")
    return [
        Finding(DriftKind.UNKNOWN, t, p, detail)
        for t, p, detail in sorted(rows)
        if (t, p) in unconfirmed
    ]


def _roles(
    broker: Broker,
    desired: _Desired,
    actual: dict[TopicPartition, admin_pb2.PartitionState],
) -> list[Finding]:
    """Replicas of converged topics whose reported role or leader epoch is not what
    the controller committed (a broker that missed or refused its pushes). Partitions
    never elected yet are not judged."""
    findings = []
    for key in sorted(desired.converged):
        row, state = desired.assigned[key], actual.get(key)
        if state is None or (row.leader_id is None and row.leader_epoch == 0):
            continue
        role = (
            "offline"
            if row.leader_id is None
            else "leader"
            if row.leader_id == broker.pk
            else "follower"
        )
        if (state.role, state.leader_epoch) != (role, row.leader_epoch):
            detail = (
                f"reports {state.role or 'no role'} at leader epoch {state.leader_epoch}; "
                f"the controller's: {role} at {row.leader_epoch}"
            )
            findings.append(Finding(DriftKind.ROLE, key[0], key[1], detail))
    return findings


def _upload_lag(
    broker: Broker,
    desired: _Desired,
    actual: dict[TopicPartition, admin_pb2.PartitionState],
) -> list[Finding]:
    """Partitions ``broker`` leads whose uploads to the object store are behind."""
    limit_ms = settings.TIER_UPLOAD_LAG_FINDING_MS
    findings = []
    for key in sorted(desired.assigned):
        row, state = desired.assigned[key], actual.get(key)
        if state is None or row.leader_id != broker.pk or state.upload_lag_ms <= limit_ms:
            continue
        detail = (
            f"uploads are behind: the oldest sealed segment has waited "
            f"{state.upload_lag_ms // 1000} s (limit {limit_ms // 1000} s); the object "
            "store may be unreachable; local retention waits"
        )
        findings.append(Finding(DriftKind.UPLOAD_LAG, key[0], key[1], detail))
    return findings


def _describe(state: admin_pb2.PartitionState) -> str:
    return f"size_bytes={state.size_bytes} log_end_offset={state.log_end_offset}"


def _copy_observed(
    broker: Broker, desired: _Desired, actual: dict[TopicPartition, admin_pb2.PartitionState]
) -> None:
    """Copy what the partition's leader reports (its preferred replica's report while it
    has no leader): a follower may lag behind."""
    now = timezone.now()
    rows = []
    for key, row in desired.assigned.items():
        state = actual.get(key)
        reporter = row.leader_id if row.leader_id is not None else row.broker_id
        if state is None or reporter != broker.pk:
            continue
        row.size_bytes, row.remote_bytes, row.log_end_offset, row.observed_at = (
            state.size_bytes,
            state.remote_bytes,
            state.log_end_offset,
            now,
        )
        row.remote_only_bytes = state.remote_only_bytes
        rows.append(row)
    PartitionAssignment.objects.bulk_update(
        rows, ["size_bytes", "remote_bytes", "remote_only_bytes", "log_end_offset", "observed_at"]
    )


def _heal(
    broker: Broker,
    desired: _Desired,
    actual: dict[TopicPartition, admin_pb2.PartitionState],
) -> list[Finding]:
    """Create missing partitions and fix configs of converged topics on ``broker``, one
    topic at a time under its lock (see the module docstring)."""
    held_ids = _open_identity(broker)
    wrong: dict[int, dict[TopicPartition, str]] = {}
    configs: dict[TopicPartition, DesiredConfig] = {}
    findings: list[Finding] = []
    for key, want in desired.converged.items():
        state, configs[key] = actual.get(key), want.config
        if state is None:
            wrong.setdefault(want.topic_id, {})[key] = DriftKind.MISSING
            continue
        diff = want.config.differences(state.config)
        if "topic_id" in diff and (state.config.topic_id or key in held_ids):
            diff.remove("topic_id")
            configs[key] = configs[key].without_topic_id()
            findings.append(_identity(key, state.config.topic_id, want.config.topic_id))
        if "remote_storage" in diff and state.config.remote_storage:
            diff.remove("remote_storage")
            configs[key] = replace(configs[key], remote_storage=True)
            findings.append(_tiered_behind_our_back(key))
        if diff:
            wrong.setdefault(want.topic_id, {})[key] = DriftKind.CONFIG + ":" + ",".join(diff)
    for topic_id in sorted(wrong):
        findings.extend(_heal_topic(broker, desired, topic_id, wrong[topic_id], configs))
    return findings


def _open_identity(broker: Broker) -> set[TopicPartition]:
    """The partitions with an open ``identity`` finding on ``broker``: their id is not
    sent by a drift pass (the broker has another, or refused it)."""
    rows = DriftFinding.objects.filter(
        broker=broker, kind=DriftKind.IDENTITY, resolved_at__isnull=True
    ).values_list("topic_name", "partition")
    return set(rows)


def _identity(key: TopicPartition, actual: str, wanted: str | None, error: str = "") -> Finding:
    if actual:
        detail = (
            f"topic_id on the broker is {actual!r}, the topic's is {wanted!r}: the partition "
            "may be another topic's (an id is set once; an operator must look)"
        )
    else:
        detail = f"the broker does not take the topic's id {wanted!r}"
        detail += f": {error}" if error else " (refused before; not sent again by drift)"
    return Finding(DriftKind.IDENTITY, key[0], key[1], detail)


def _tiered_behind_our_back(key: TopicPartition) -> Finding:
    detail = (
        "tiered on the broker (remote_storage), not in the topic: brokers never turn it "
        "off (its remote segments would be orphaned); turn it on for the topic, or an "
        "operator must look"
    )
    return Finding(DriftKind.REMOTE_STORAGE, key[0], key[1], detail)


def _heal_topic(
    broker: Broker,
    desired: _Desired,
    topic_id: int,
    wrong: dict[TopicPartition, str],
    configs: dict[TopicPartition, DesiredConfig],
) -> list[Finding]:
    generation = desired.converged[next(iter(wrong))].generation
    error = ""
    changed: set[TopicPartition] = set()
    try:
        with topic_lock(topic_id, wait_s=HEAL_LOCK_WAIT_S):
            keys = _still_wanted(broker, topic_id, generation, set(wrong))
            wrong = {key: what for key, what in wrong.items() if key in keys}
            if wrong:
                specs = [brokers.spec(t, p, configs[(t, p)]) for (t, p) in sorted(wrong)]
                changed = brokers.ensure_partitions(broker.address, specs)
    except TopicBusy:
        error = "a reconcile run of the topic is in progress"
    except (BrokerUnavailable, BrokerRefusedError) as exc:
        log.warning("drift heal of topic %s on %s failed: %s", topic_id, broker, exc.message)
        error = exc.message
        if isinstance(exc, BrokerRefusedError):
            return [
                *(_finding(key, what, False, error) for key, what in sorted(wrong.items())),
                *_refused_ids(wrong, configs, exc),
            ]
    return [_finding(key, what, key in changed, error) for key, what in sorted(wrong.items())]


def _refused_ids(
    wrong: dict[TopicPartition, str],
    configs: dict[TopicPartition, DesiredConfig],
    exc: BrokerRefusedError,
) -> list[Finding]:
    """An ``identity`` finding for each partition whose refused heal was to set its id:
    the next passes heal it without the id (``_open_identity``)."""
    return [
        _identity(key, "", configs[key].topic_id, exc.message)
        for key, what in sorted(wrong.items())
        if "topic_id" in what.partition(":")[2].split(",")
    ]


def _still_wanted(
    broker: Broker, topic_id: int, generation: int, keys: set[TopicPartition]
) -> set[TopicPartition]:
    """Of ``keys``, those still wanted on ``broker``: the topic (re-read) is still
    converged at ``generation`` and the partitions are still assigned there."""
    topic = Topic.objects.filter(
        pk=topic_id,
        generation=generation,
        observed_generation=generation,
        status=ProvisioningStatus.READY,
    ).first()
    if topic is None:
        return set()
    assigned = {
        partition
        for partition, replicas in PartitionAssignment.objects.filter(topic=topic).values_list(
            "partition", "replicas"
        )
        if broker.broker_id in replicas
    }
    return {(t, p) for (t, p) in keys if t == topic.full_name and p in assigned}


def _finding(key: TopicPartition, what: str, healed: bool, error: str) -> Finding:
    kind, _, fields = what.partition(":")
    detail = f"differs: {fields}" if fields else "missing on its broker"
    if error:
        detail += f"; not healed: {error}"
    return Finding(kind, key[0], key[1], detail, healed)


def report_finding(broker: Broker, finding: Finding) -> None:
    """Open (or refresh) one finding on ``broker`` outside a drift pass; the other open
    findings stay as they are."""
    now = timezone.now()
    with transaction.atomic():
        row = (
            DriftFinding.objects.select_for_update()
            .filter(
                broker=broker,
                topic_name=finding.topic,
                partition=finding.partition,
                kind=finding.kind,
                resolved_at__isnull=True,
            )
            .first()
        )
        _upsert(broker, row, finding, now)


def open_unknown_partitions(broker: Broker, topic_name: str) -> set[int]:
    """The partitions of ``topic_name`` with an open ``unknown`` finding on ``broker``."""
    return set(
        DriftFinding.objects.filter(
            broker=broker, topic_name=topic_name, kind=DriftKind.UNKNOWN, resolved_at__isnull=True
        ).values_list("partition", flat=True)
    )


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
    interval (a lost job, retries exhausted): pending, provisioning or deleting. Every
    run touches ``updated_at`` at its start and when it is to be retried, so a topic
    with a run in progress or waiting for its retry (at most ``RETRY_BACKOFF_MAX_S``) is
    not listed."""
    cutoff = timezone.now() - timedelta(seconds=settings.RECONCILE_INTERVAL_S + RETRY_BACKOFF_MAX_S)
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
