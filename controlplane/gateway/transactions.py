"""The transaction calls the control plane makes to one cluster's brokers: listing and
describing transactional ids and half messages, aborting a hanging transaction, deciding
a half message as an operator; a partition's producers and an operator's abort marker
for one of them. Through the SDK's ``Admin`` on the control plane's own
channel security (its internal token may act on every tenant's); failures leave as the
gateway's typed errors (``groups.connected_admin``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from controlplane.gateway.groups import connected_admin
from dataplane.client import TopicPartition
from dataplane.client.txn_admin import HalfMessageListing, ProducerListing, TransactionListing


def list_transactions(
    addresses: Sequence[str], states: Iterable[str] = ()
) -> list[TransactionListing]:
    with connected_admin(addresses) as admin:
        return admin.list_transactions(states)


def describe_transaction(addresses: Sequence[str], transactional_id: str) -> TransactionListing:
    with connected_admin(addresses) as admin:
        return admin.describe_transaction(transactional_id)


def abort_transaction(addresses: Sequence[str], transactional_id: str) -> TransactionListing:
    with connected_admin(addresses) as admin:
        return admin.abort_transaction(transactional_id)


def list_half_messages(
    addresses: Sequence[str], producer_group: str | None = None
) -> list[HalfMessageListing]:
    with connected_admin(addresses) as admin:
        return admin.list_half_messages(producer_group)


def resolve_half_message(
    addresses: Sequence[str], producer_group: str, half_id: str, *, commit: bool
) -> str:
    with connected_admin(addresses) as admin:
        return admin.resolve_half_message(producer_group, half_id, commit=commit)


def describe_producers(addresses: Sequence[str], tp: TopicPartition) -> list[ProducerListing]:
    with connected_admin(addresses) as admin:
        return admin.describe_producers(tp)


def abort_producer(addresses: Sequence[str], tp: TopicPartition, producer_id: int) -> int:
    with connected_admin(addresses) as admin:
        return admin.abort_producer(tp, producer_id)
