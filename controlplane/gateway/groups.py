"""The consumer-group calls the control plane makes to one cluster's brokers.

Groups live in the brokers (each group's coordinator keeps its members and committed
offsets), so these calls go through the SDK's ``Admin`` — which finds each group's
coordinator and each partition's leader — on the control plane's own channel security
(``channels.broker_security``: TLS and the controller's token, which holds the internal
role and so may act on every tenant's groups). ``addresses`` are the cluster's brokers;
any reachable one bootstraps the rest. Failures leave as the gateway's typed errors:
``BrokerUnavailable`` when retrying may help, ``BrokerRefusedError`` when not (its
``details["error"]`` names the broker's ``ErrorCode``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from django.conf import settings

from controlplane.accounts.internal import controller_tokens
from controlplane.gateway.errors import BrokerRefusedError, BrokerUnavailable
from dataplane.client import Admin, TopicPartition
from dataplane.client.admin import PartitionLag
from dataplane.client.coordinator import GroupDescription, GroupListing
from dataplane.errors import MeridianError

_CLIENT_ID = "meridian-controlplane"


@contextmanager
def connected_admin(addresses: Sequence[str]) -> Iterator[Admin]:
    """An ``Admin`` on the cluster; its ``MeridianError`` leaves typed (module docstring)."""
    if not addresses:
        raise BrokerUnavailable("", "the cluster has no broker with an address")
    tokens = controller_tokens() if settings.BROKER_AUTH else None
    try:
        with Admin(
            list(addresses),
            client_id=_CLIENT_ID,
            request_timeout_ms=settings.BROKER_RPC_TIMEOUT_S * 1000,
            # An API request waits for a region's brokers a little, never a minute.
            api_timeout_ms=settings.BROKER_RPC_TIMEOUT_S * 2000,
            credentials=tokens,
            tls=settings.BROKER_TLS_CA_FILE or None,
        ) as admin:
            yield admin
    except MeridianError as error:
        where = ",".join(addresses)
        if error.retriable:
            raise BrokerUnavailable(where, str(error)) from error
        raise BrokerRefusedError(
            f"brokers {where} refused: {error}", address=where, error=error.code_name
        ) from error


def list_groups(addresses: Sequence[str]) -> list[GroupListing]:
    """Every group of the cluster (each broker lists those it coordinates)."""
    with connected_admin(addresses) as admin:
        return admin.list_groups()


def describe_group(addresses: Sequence[str], group_id: str) -> GroupDescription:
    """State, members with assignments and committed offsets; ``Dead`` when unknown."""
    with connected_admin(addresses) as admin:
        return admin.describe_group(group_id)  # type: ignore[no-any-return]


def group_lag(addresses: Sequence[str], group_id: str) -> dict[TopicPartition, PartitionLag]:
    """Per committed partition: committed, end offset, lag in records and in time."""
    with connected_admin(addresses) as admin:
        return admin.group_lag(group_id)


def list_offsets(
    addresses: Sequence[str], specs: Mapping[TopicPartition, int | str]
) -> dict[TopicPartition, tuple[int, int]]:
    """``{tp: (offset, timestamp)}`` for ``"earliest"``, ``"latest"`` or a timestamp."""
    with connected_admin(addresses) as admin:
        return admin.list_offsets(specs)


def alter_group_offsets(
    addresses: Sequence[str], group_id: str, offsets: Mapping[TopicPartition, int]
) -> None:
    """Set the group's committed offsets (refused while it has members)."""
    with connected_admin(addresses) as admin:
        admin.alter_group_offsets(group_id, offsets)


def delete_group(addresses: Sequence[str], group_id: str) -> None:
    """Delete an empty group and its committed offsets."""
    with connected_admin(addresses) as admin:
        error = admin.delete_groups([group_id])[group_id]
        if error is not None:
            raise error
