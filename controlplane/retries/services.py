"""Consumer groups' retry policies and their dead letters (docs/delay.md).

A policy is declared for a group (``create_retry_policy``): that makes its retry topic
``<group id>.retry`` and dead-letter topic ``<group id>.dlq`` (ordinary topics of the
tenant, placed by ``topics.services.create_topic`` and counted against its quotas) in
one transaction, audited. The controller pushes every policy of a cluster's topics to
its brokers (``delay_push``), which answer consumers' ``GetRetryPolicy``.

Dead letters are records of the dead-letter topic, read through its leader
(``dead_letters``, ``dead_letter``). ``replay_dead_letters`` copies chosen ones (or a
range) back to the topic each came from (``x-retry-topic``, ``x-retry-partition``): key,
value and own headers, without the retry headers, plus ``x-replayed-from``; audited with
what was done, also when it stops part-way (a broker down). A record's origin counts
only when the group's own retries wrote it (``x-retry-group`` names the group: the
headers are anyone's to write); a record without one, whose original topic is not one
of the tenant's, or whose topic the acting person may not produce to (its role and the
topic's ACLs, as the brokers decide) is skipped and said so. Another tenant's policy
answers as a missing one (the API's queryset).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest, NotFound
from controlplane.gateway import delays as gateway
from controlplane.gateway.errors import BrokerUnavailable
from controlplane.regions.models import Cluster, Region
from controlplane.retries.models import RetryPolicy
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics import services as topic_services
from controlplane.topics.acls import actor_may
from controlplane.topics.choices import AclOperation, TopicStatus
from controlplane.topics.models import Topic
from dataplane._gen.meridian.v1 import delay_pb2
from dataplane.delays import (
    DEAD_LETTER_SUFFIX,
    DLQ_REASON,
    RETRY_GROUP,
    RETRY_HEADERS,
    RETRY_PARTITION,
    RETRY_SUFFIX,
    RETRY_TOPIC,
    attempt_of,
    header,
)
from dataplane.hashing import partition_for_key
from dataplane.records import Record

log = logging.getLogger(__name__)

REPLAYED_FROM = "x-replayed-from"
POLICY_FIELDS = ("max_attempts", "backoff_initial_ms", "backoff_multiplier", "backoff_max_ms")
MAX_REPLAY = 1000
MAX_PAGE = 200


@transaction.atomic
def create_retry_policy(
    tenant: Tenant,
    *,
    group: str,
    actor: Actor,
    region: Region | str | None = None,
    partitions: int = 1,
    **settings: Any,
) -> RetryPolicy:
    """A retry policy for group ``<tenant>.<group>`` with its retry and dead-letter
    topics (``partitions`` each, in ``region``: the tenant's home region by default).
    ``Conflict`` for a group that has one, or a topic name in use; ``QuotaExceeded``;
    ``InvalidRequest`` for bad values."""
    tenant = lock_open_tenant(tenant)
    unknown = sorted(set(settings) - set(POLICY_FIELDS))
    if unknown:
        raise InvalidRequest(f"{unknown[0]}: unknown", **{f: ["unknown"] for f in unknown})
    policy = RetryPolicy(tenant=tenant, group=group, created_by=actor.name, **settings)
    policy.full_clean(exclude=["retry_topic", "dead_letter_topic"])
    if RetryPolicy.objects.filter(tenant=tenant, group=group).exists():
        raise Conflict(f"group {policy.group_id!r} has a retry policy", group=["has one"])
    policy.retry_topic = topic_services.create_topic(
        tenant, name=group + RETRY_SUFFIX, partitions=partitions, region=region, actor=actor
    )
    policy.dead_letter_topic = topic_services.create_topic(
        tenant, name=group + DEAD_LETTER_SUFFIX, partitions=partitions, region=region, actor=actor
    )
    policy.save()
    audit.record(actor, "retry_policy.create", policy, after=audit.snapshot(policy), tenant=tenant)
    return policy


@transaction.atomic
def update_retry_policy(policy: RetryPolicy, *, actor: Actor, **changes: Any) -> RetryPolicy:
    """Change the attempts and backoff (the topics stay as they are)."""
    unknown = sorted(set(changes) - set(POLICY_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: cannot be changed", **{f: ["cannot be changed"] for f in unknown}
        )
    lock_open_tenant(policy.tenant)
    policy = RetryPolicy.objects.select_for_update().select_related("tenant").get(pk=policy.pk)
    before = audit.snapshot(policy)
    for name, value in changes.items():
        setattr(policy, name, value)
    policy.full_clean(exclude=["retry_topic", "dead_letter_topic"])
    policy.save()
    audit.record(
        actor, "retry_policy.update", policy, before=before, after=audit.snapshot(policy),
        tenant=policy.tenant,
    )  # fmt: skip
    return policy


@transaction.atomic
def delete_retry_policy(policy: RetryPolicy, *, actor: Actor) -> None:
    """Delete the policy and its retry and dead-letter topics (dead letters with them)."""
    lock_open_tenant(policy.tenant)
    policy = RetryPolicy.objects.select_for_update().select_related("tenant").get(pk=policy.pk)
    for topic in (policy.retry_topic, policy.dead_letter_topic):
        if topic is not None and topic.status != TopicStatus.DELETING:
            topic_services.delete_topic(topic, actor=actor)
    audit.record(actor, "retry_policy.delete", policy, before=audit.snapshot(policy),
                 tenant=policy.tenant)  # fmt: skip
    policy.delete()


def delay_push(cluster: Cluster) -> delay_pb2.DelayPush:
    """The retry policies whose topics are on ``cluster``, for its brokers (the complete
    set: ``policies_listed``), ordered so an unchanged push encodes the same bytes; and
    the ``max_message_bytes`` of each of the cluster's topics (timer logs' movers deliver
    to topics their broker may not host)."""
    limits = (
        Topic.objects.filter(cluster=cluster)
        .exclude(status=TopicStatus.DELETING)
        .order_by("full_name")
        .values_list("full_name", "max_message_bytes")
    )
    policies = (
        RetryPolicy.objects.filter(retry_topic__cluster=cluster, dead_letter_topic__isnull=False)
        .exclude(tenant__status=TopicStatus.DELETING)
        .select_related("tenant", "retry_topic", "dead_letter_topic")
        .order_by("tenant__slug", "group")
    )
    return delay_pb2.DelayPush(
        policies_listed=True,
        retry_policies=[
            delay_pb2.RetryPolicy(
                group_id=p.group_id,
                max_attempts=p.max_attempts,
                backoff_initial_ms=p.backoff_initial_ms,
                backoff_multiplier=p.backoff_multiplier,
                backoff_max_ms=p.backoff_max_ms,
                retry_topic=p.retry_topic.full_name,
                dead_letter_topic=p.dead_letter_topic.full_name,
            )
            for p in policies
            if p.retry_topic is not None and p.dead_letter_topic is not None
        ],
        max_message_bytes=dict(limits),
    )


# -- dead letters ---------------------------------------------------------------------------
@dataclass
class DeadLetter:
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    group: str = ""  # the group whose dead-letter topic holds it

    @property
    def reason(self) -> str:
        found = header(self.headers, DLQ_REASON)
        return found.decode(errors="replace") if found else ""

    @property
    def by_group(self) -> bool:
        """Whether the group's own retries wrote it (its retry headers count)."""
        return bool(self.group) and header(self.headers, RETRY_GROUP) == self.group.encode()

    @property
    def origin(self) -> tuple[str, int | None]:
        """The topic (and partition) the record was first delivered on ("" when not
        written by the group's retries)."""
        if not self.by_group:
            return ("", None)
        topic = header(self.headers, RETRY_TOPIC)
        partition = header(self.headers, RETRY_PARTITION)
        number = int(partition) if partition and partition.isdigit() else None
        return (topic.decode(errors="replace") if topic else "", number)

    @property
    def attempts(self) -> int:
        return attempt_of(self.headers) if self.by_group else 1


@dataclass
class DeadLetterPage:
    records: list[DeadLetter]
    partition: int
    log_start_offset: int
    high_watermark: int
    next_offset: int | None


def _dead_letter_topic(policy: RetryPolicy) -> Topic:
    topic = policy.dead_letter_topic
    if topic is None or topic.status == TopicStatus.DELETING:
        raise NotFound(f"group {policy.group_id!r} has no dead-letter topic now")
    return topic


def _leader(topic: Topic, partition: int) -> str:
    if not 0 <= partition < topic.partitions:
        raise NotFound(f"{topic.full_name} has no partition {partition}", partition=partition)
    found = topic.assignments.filter(partition=partition).select_related("leader").first()
    if found is None or found.leader is None or not found.leader.address:
        raise BrokerUnavailable("", f"{topic.full_name}-{partition} has no leader now")
    return found.leader.address


def _letter(policy: RetryPolicy, partition: int, record: Record) -> DeadLetter:
    return DeadLetter(
        partition, record.offset, record.timestamp, record.key, record.value, record.headers,
        policy.group_id,
    )  # fmt: skip


def dead_letters(
    policy: RetryPolicy, *, partition: int = 0, offset: int | None = None, limit: int = 50
) -> DeadLetterPage:
    """Dead letters of one partition from ``offset`` (default: the first kept), at most
    ``limit``."""
    topic = _dead_letter_topic(policy)
    address = _leader(topic, partition)
    limit = max(1, min(MAX_PAGE, limit))
    records, result = gateway.read(address, topic.full_name, partition, _start(offset))
    if offset is None or offset < result.log_start_offset:
        start = result.log_start_offset
        if offset is None and start > 0:
            records, result = gateway.read(address, topic.full_name, partition, start)
    page = [_letter(policy, partition, r) for r in records[:limit]]
    following = page[-1].offset + 1 if page else None
    more = following is not None and following < result.high_watermark
    return DeadLetterPage(
        page, partition, result.log_start_offset, result.high_watermark,
        following if more else None,
    )  # fmt: skip


def _start(offset: int | None) -> int:
    return 0 if offset is None or offset < 0 else offset


def dead_letter(policy: RetryPolicy, partition: int, offset: int) -> DeadLetter:
    """One dead letter; ``NotFound`` when the partition holds none at ``offset``."""
    topic = _dead_letter_topic(policy)
    address = _leader(topic, partition)
    records, _ = gateway.read(address, topic.full_name, partition, offset)
    if not records or records[0].offset != offset:
        raise NotFound(
            f"no dead letter at {partition}:{offset}", partition=partition, offset=offset
        )
    return _letter(policy, partition, records[0])


@dataclass
class Replayed:
    partition: int
    offset: int
    topic: str = ""
    to_partition: int = -1
    to_offset: int = -1
    skipped: str = ""


@dataclass
class ReplayOutcome:
    replayed: int = 0
    skipped: int = 0
    records: list[Replayed] = field(default_factory=list)


def replay_dead_letters(
    policy: RetryPolicy,
    *,
    records: Sequence[tuple[int, int]] = (),
    partition: int | None = None,
    from_offset: int | None = None,
    to_offset: int | None = None,
    actor: Actor,
) -> ReplayOutcome:
    """Copy the dead letters ``records`` ((partition, offset) pairs), or those of
    ``partition`` in [``from_offset``, ``to_offset``], back to their topics (see the
    module docstring); at most ``MAX_REPLAY`` in one call. Audited, with what went where."""
    chosen = _chosen(policy, records, partition, from_offset, to_offset)
    outcome = ReplayOutcome()
    tenant = policy.tenant
    stopped = ""
    try:
        for letter in chosen:
            outcome.records.append(_replay_one(tenant, policy, letter, actor))
    except BaseException as exc:  # what was written before it is audited all the same
        stopped = f"stopped after {len(outcome.records)} of {len(chosen)}: {exc}"
        raise
    finally:
        outcome.replayed = sum(1 for r in outcome.records if not r.skipped)
        outcome.skipped = len(outcome.records) - outcome.replayed
        after: dict[str, Any] = {
            "replayed": outcome.replayed,
            "skipped": outcome.skipped,
            "records": [vars(r) for r in outcome.records],
        }
        if stopped:
            after["stopped"] = stopped
        with transaction.atomic():
            audit.record(actor, "dead_letter.replay", policy, after=after, tenant=tenant)
    return outcome


def _chosen(
    policy: RetryPolicy,
    records: Sequence[tuple[int, int]],
    partition: int | None,
    from_offset: int | None,
    to_offset: int | None,
) -> list[DeadLetter]:
    ranged = partition is not None or from_offset is not None or to_offset is not None
    if bool(records) == ranged:
        raise InvalidRequest(
            "name records, or a partition with from_offset and to_offset",
            records=["records or a range, not both"],
        )
    if records:
        if len(records) > MAX_REPLAY:
            raise InvalidRequest(f"at most {MAX_REPLAY} records at once", records=["too many"])
        return [dead_letter(policy, p, o) for p, o in dict.fromkeys(records)]
    if partition is None or from_offset is None or to_offset is None or to_offset < from_offset:
        raise InvalidRequest(
            "a range needs partition, from_offset and to_offset >= from_offset",
            to_offset=["at least from_offset"],
        )
    if to_offset - from_offset >= MAX_REPLAY:
        raise InvalidRequest(f"at most {MAX_REPLAY} records at once", to_offset=["too far"])
    return list(_range(policy, partition, from_offset, to_offset))


def _range(policy: RetryPolicy, partition: int, first: int, last: int) -> Iterable[DeadLetter]:
    offset = first
    while offset <= last:
        page = dead_letters(policy, partition=partition, offset=offset, limit=MAX_PAGE)
        for letter in page.records:
            if letter.offset > last:
                return
            yield letter
        if page.next_offset is None:
            return
        offset = page.next_offset


def _replay_one(tenant: Tenant, policy: RetryPolicy, letter: DeadLetter, actor: Actor) -> Replayed:
    done = Replayed(letter.partition, letter.offset)
    if not letter.by_group:
        done.skipped = f"not written by the retries of {policy.group_id} (no origin to trust)"
        return done
    name, wanted = letter.origin
    topic = Topic.objects.filter(tenant=tenant).named(name).first() if name else None
    if topic is None or topic.status == TopicStatus.DELETING:
        done.skipped = f"its topic {name!r} is not one of the tenant's" if name else "no origin"
        return done
    if not actor_may(actor, topic, AclOperation.PRODUCE):
        done.skipped = f"{actor.name} may not produce to {topic.full_name}"
        return done
    if wanted is None or wanted >= topic.partitions:
        wanted = partition_for_key(letter.key, topic.partitions) if letter.key else 0
    dead = policy.dead_letter_topic
    headers = [(k, v) for k, v in letter.headers if k not in RETRY_HEADERS and k != DLQ_REASON]
    source = f"{dead.full_name if dead else ''}:{letter.partition}:{letter.offset}"
    headers.append((REPLAYED_FROM, source.encode()))
    base = gateway.append(
        _leader(topic, wanted), topic.full_name, wanted, [(letter.key, letter.value, headers)]
    )
    done.topic, done.to_partition, done.to_offset = topic.full_name, wanted, base
    return done
