"""A tenant's transactional ids and half messages, read from and changed in the brokers.

Transactional ids and producer groups are tenant-scoped by name, as the brokers scope
them (``<tenant>.<id>``, the rule of consumer groups: ``core.validators.tenant_of_name``).
They live at the transaction coordinators of the clusters hosting the tenant's topics
(its producers write there), so every call looks there; a name outside the tenant's
prefix, or one no cluster knows, is ``NotFound`` — the same answer, so a caller learns
nothing about another tenant's.

Aborting a hanging transaction (one its producer left open: it blocks read_committed
consumers of its partitions until its timeout) fences its producer; deciding a half
message commits or rolls it back for a producer that cannot. Both are audited
(``transaction.abort``, ``half_message.commit`` / ``half_message.rollback``) in a
transaction around the brokers' call, so a refused call leaves no audit event; a
transaction or half message no longer open is ``Conflict``.

A partition's producers (``list_partition_producers``) are read at its leader, with
where their open transaction began there; ``abort_partition_producer`` writes an abort
marker for one of them (Kafka's ``kafka-transactions --abort``: a transaction hanging on
that partition which its coordinator cannot end), audited as
``transaction.abort_producer``. A topic of another tenant is ``NotFound``, as a missing
one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from django.db import transaction

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest, NotFound
from controlplane.core.validators import tenant_of_name
from controlplane.gateway import transactions as gateway
from controlplane.gateway.errors import BrokerRefusedError
from controlplane.groups.services import clusters_of
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from dataplane.client import TopicPartition
from dataplane.client.txn_admin import (
    STATES,
    HalfMessageListing,
    ProducerListing,
    TransactionListing,
)

OBJECT_TYPE = "transactions.transaction"
PARTITION_OBJECT_TYPE = "topics.partition"
HALF_OBJECT_TYPE = "transactions.half_message"
_NOT_OPEN = frozenset({"INVALID_TXN_STATE"})
_GONE = frozenset({"TRANSACTIONAL_ID_NOT_FOUND", "HALF_MESSAGE_NOT_FOUND"})


class TransactionNotOpen(Conflict):
    """The transactional id has no open transaction (or the half message is decided)."""

    code = "transaction_not_open"


@dataclass(frozen=True)
class Transaction:
    transactional_id: str
    tenant: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    started_ms: int | None  # when its open transaction began; None: none open
    age_seconds: float | None
    last_update_ms: int
    coordinator_id: int
    partitions: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True)
class HalfMessage:
    producer_group: str
    half_id: str
    tenant: str
    topic: str
    partition: int
    state: str
    created_ms: int
    age_seconds: float
    checks: int
    max_checks: int
    next_check_ms: int | None
    default_outcome: str
    client_id: str
    resolved_by: str


def _age(start_ms: int) -> float | None:
    return None if start_ms < 0 else max(0.0, time.time() - start_ms / 1000)


def _transaction(listing: TransactionListing, tenant: str) -> Transaction:
    started = listing.start_ms if listing.start_ms >= 0 else None
    return Transaction(
        listing.transactional_id,
        tenant,
        listing.state,
        listing.producer_id,
        listing.producer_epoch,
        listing.timeout_ms,
        started,
        _age(listing.start_ms),
        listing.last_update_ms,
        listing.coordinator_id,
        list(listing.partitions),
    )


def _half_message(listing: HalfMessageListing, tenant: str) -> HalfMessage:
    return HalfMessage(
        listing.producer_group,
        listing.half_id,
        tenant,
        listing.topic,
        listing.partition,
        listing.state,
        listing.created_ms,
        _age(listing.created_ms) or 0.0,
        listing.checks,
        listing.max_checks,
        listing.next_check_ms if listing.next_check_ms >= 0 else None,
        listing.default_outcome,
        listing.client_id,
        listing.resolved_by,
    )


def _owned(name: str, tenants: Iterable[Tenant]) -> str | None:
    """The slug of the tenant among ``tenants`` that ``name`` belongs to."""
    slug = tenant_of_name(name)
    return slug if slug in {t.slug for t in tenants} else None


# -- reading ---------------------------------------------------------------------------
def list_transactions(
    tenants: Sequence[Tenant], *, states: Iterable[str] = ()
) -> list[Transaction]:
    """The tenants' transactional ids on every cluster of their topics, by id, in
    ``states`` (all when none); an unknown state is ``InvalidRequest``."""
    wanted = list(states)
    unknown = sorted(set(wanted) - set(STATES.values()))
    if unknown:
        raise InvalidRequest(
            f"unknown transaction states {unknown}", state=f"one of {sorted(STATES.values())}"
        )
    found: dict[str, Transaction] = {}
    for addresses in clusters_of(tenants).values():
        for listing in gateway.list_transactions(addresses, wanted):
            slug = _owned(listing.transactional_id, tenants)
            if slug is not None:
                found[listing.transactional_id] = _transaction(listing, slug)
    return sorted(found.values(), key=lambda t: t.transactional_id)


def _locate(tenant: Tenant, transactional_id: str) -> tuple[list[str], TransactionListing]:
    if tenant_of_name(transactional_id) != tenant.slug:
        raise _not_found(transactional_id)
    for addresses in clusters_of([tenant]).values():
        try:
            return addresses, gateway.describe_transaction(addresses, transactional_id)
        except BrokerRefusedError as refused:
            if refused.details.get("error") not in _GONE:
                raise
    raise _not_found(transactional_id)


def _not_found(transactional_id: str) -> NotFound:
    return NotFound(
        f"transactional id {transactional_id!r} not found", transactional_id=transactional_id
    )


def get_transaction(tenant: Tenant, transactional_id: str) -> Transaction:
    """The transactional id, or ``NotFound``."""
    return _transaction(_locate(tenant, transactional_id)[1], tenant.slug)


def list_half_messages(tenants: Sequence[Tenant], *, group: str | None = None) -> list[HalfMessage]:
    """The tenants' half messages (of ``group``), pending and recently decided."""
    found: list[HalfMessage] = []
    for addresses in clusters_of(tenants).values():
        for listing in gateway.list_half_messages(addresses, group):
            slug = _owned(listing.producer_group, tenants)
            if slug is not None:
                found.append(_half_message(listing, slug))
    return sorted(found, key=lambda h: (h.producer_group, h.created_ms, h.half_id))


# -- changing --------------------------------------------------------------------------
def abort_transaction(tenant: Tenant, transactional_id: str, *, actor: Actor) -> Transaction:
    """Abort the transactional id's open transaction, fencing its producer; the state
    after. ``TransactionNotOpen`` when none is open."""
    addresses, before = _locate(tenant, transactional_id)
    if before.state != "ongoing":
        raise _not_open(transactional_id, before.state)
    with transaction.atomic():
        audit.record_about(
            actor,
            "transaction.abort",
            object_type=OBJECT_TYPE,
            object_id=transactional_id,
            before=_audited(before),
            tenant=tenant,
        )
        try:
            after = gateway.abort_transaction(addresses, transactional_id)
        except BrokerRefusedError as refused:
            if refused.details.get("error") in _NOT_OPEN:
                raise _not_open(transactional_id, "ended meanwhile") from refused
            raise
    return _transaction(after, tenant.slug)


def _audited(listing: TransactionListing) -> dict[str, object]:
    return {
        "state": listing.state,
        "producer_id": listing.producer_id,
        "producer_epoch": listing.producer_epoch,
        "partitions": [f"{tp.topic}/{tp.partition}" for tp in listing.partitions],
    }


def _not_open(transactional_id: str, state: str) -> TransactionNotOpen:
    return TransactionNotOpen(
        f"transactional id {transactional_id!r} has no open transaction ({state})",
        transactional_id=transactional_id,
        state=state,
    )


def resolve_half_message(
    tenant: Tenant, group: str, half_id: str, *, commit: bool, actor: Actor
) -> HalfMessage:
    """Commit or roll back a pending half message as an operator; the message after.
    ``NotFound`` for another tenant's group or an unknown id, ``TransactionNotOpen``
    once it is decided."""
    if tenant_of_name(group) != tenant.slug:
        raise _half_not_found(group, half_id)
    for addresses in clusters_of([tenant]).values():
        pending = [h for h in gateway.list_half_messages(addresses, group) if h.half_id == half_id]
        if not pending:
            continue
        if pending[0].state != "ongoing":
            raise _not_open(f"{group}/{half_id}", pending[0].state)
        with transaction.atomic():
            audit.record_about(
                actor,
                "half_message.commit" if commit else "half_message.rollback",
                object_type=HALF_OBJECT_TYPE,
                object_id=f"{group}/{half_id}",
                before={"state": pending[0].state, "checks": pending[0].checks},
                tenant=tenant,
            )
            try:
                gateway.resolve_half_message(addresses, group, half_id, commit=commit)
            except BrokerRefusedError as refused:
                if refused.details.get("error") in _NOT_OPEN:
                    raise _not_open(f"{group}/{half_id}", "decided meanwhile") from refused
                raise
        after = [h for h in gateway.list_half_messages(addresses, group) if h.half_id == half_id]
        return _half_message(after[0] if after else pending[0], tenant.slug)
    raise _half_not_found(group, half_id)


def _half_not_found(group: str, half_id: str) -> NotFound:
    return NotFound(
        f"half message {half_id!r} of {group!r} not found", producer_group=group, half_id=half_id
    )


# -- a partition's producers -------------------------------------------------------------
def _partition(tenant: Tenant, topic: str, partition: int) -> tuple[list[str], TopicPartition]:
    """The brokers of the cluster holding the tenant's ``topic``, or ``NotFound`` (for
    another tenant's topic alike)."""
    found = Topic.objects.filter(tenant=tenant, full_name=topic).first()
    if found is None or not 0 <= partition < found.partitions:
        raise NotFound(f"partition {topic}/{partition} not found", topic=topic, partition=partition)
    return clusters_of([tenant]).get(found.cluster_id, []), TopicPartition(topic, partition)


def list_partition_producers(tenant: Tenant, topic: str, partition: int) -> list[ProducerListing]:
    """The partition's producers at its leader, with their open transactions there."""
    addresses, tp = _partition(tenant, topic, partition)
    return gateway.describe_producers(addresses, tp)


def abort_partition_producer(
    tenant: Tenant, topic: str, partition: int, producer_id: int, *, actor: Actor
) -> int:
    """Write an abort marker for ``producer_id``'s transaction open on the partition;
    where it began. ``TransactionNotOpen`` when none is open there."""
    addresses, tp = _partition(tenant, topic, partition)
    name = f"{topic}/{partition}"
    with transaction.atomic():
        audit.record_about(
            actor,
            "transaction.abort_producer",
            object_type=PARTITION_OBJECT_TYPE,
            object_id=name,
            before={"producer_id": producer_id},
            tenant=tenant,
        )
        try:
            return gateway.abort_producer(addresses, tp, producer_id)
        except BrokerRefusedError as refused:
            if refused.details.get("error") in _NOT_OPEN:
                raise TransactionNotOpen(
                    f"producer {producer_id} has no transaction open on {name}",
                    topic=topic,
                    partition=partition,
                    producer_id=producer_id,
                ) from refused
            raise
