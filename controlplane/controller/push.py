"""Pushing ``UpdateMetadata`` to every broker of a cluster at once.

Calls run concurrently (gRPC futures) with a deadline each; an answer is the broker's
heartbeat, a failure a typed ``MeridianError``. Channels are kept per address and
reconnect quickly: a restarted broker is heard from at the next tick rather than after
gRPC's default reconnect backoff (up to two minutes).

Every push also lists the platform's identities (``with_identities``): each tenant not
being deleted, with its immutable id, and the ids of the service accounts deleted within
``MAX_TOKEN_LIFETIME_S`` (from their audit events), so the brokers refuse a deleted
tenant's or service account's tokens from the next push on (within a controller tick)
rather than when the tokens expire.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

import grpc
from django.conf import settings
from django.utils import timezone

from controlplane.accounts.internal import broker_channel
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.models import AuditEvent
from controlplane.regions.models import Broker
from controlplane.tenants.models import Tenant
from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc
from dataplane.client.connection import CHANNEL_OPTIONS
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

ACCOUNT_DELETED = "service_account.delete"

_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


@dataclass(frozen=True)
class PushOutcome:
    """One broker's answer (``response``) or failure (``error``)."""

    response: admin_pb2.UpdateMetadataResponse | None = None
    error: MeridianError | None = None

    @property
    def stale_epoch(self) -> bool:
        return self.error is not None and self.error.code == ErrorCode.STALE_CONTROLLER_EPOCH


class MetadataPusher:
    """Thread safety: one caller (the controller's loop)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._stubs: dict[str, tuple[grpc.Channel, admin_pb2_grpc.AdminStub]] = {}

    def push(
        self, brokers: Iterable[Broker], request: admin_pb2.UpdateMetadataRequest
    ) -> dict[int, PushOutcome]:
        """``request`` (with the live identities) to every addressed broker; outcomes by
        ``Broker.pk``."""
        with_identities(request)
        calls = {
            broker.pk: self._stub(broker.address).UpdateMetadata.future(
                request, timeout=self.timeout_s
            )
            for broker in brokers
            if broker.address
        }
        outcomes = {}
        for pk, call in calls.items():
            try:
                outcomes[pk] = PushOutcome(response=call.result())
            except grpc.RpcError as exc:
                outcomes[pk] = PushOutcome(error=error_from_rpc(exc))
        return outcomes

    def _stub(self, address: str) -> admin_pb2_grpc.AdminStub:
        if address not in self._stubs:
            channel = broker_channel(address, _OPTIONS)
            self._stubs[address] = (channel, admin_pb2_grpc.AdminStub(channel))
        return self._stubs[address][1]

    def close(self) -> None:
        for channel, _ in self._stubs.values():
            channel.close()
        self._stubs.clear()


def with_identities(request: admin_pb2.UpdateMetadataRequest) -> None:
    """Set ``request``'s identities (``tenants``, ``identities_listed``,
    ``revoked_accounts``), ordered so that an unchanged push encodes the same bytes."""
    tenants = (
        Tenant.objects.exclude(status=ProvisioningStatus.DELETING)
        .order_by("slug")
        .values_list("slug", "uid")
    )
    del request.tenants[:]
    request.tenants.extend(
        admin_pb2.TenantIdentity(slug=slug, id=str(uid)) for slug, uid in tenants
    )
    request.identities_listed = True
    del request.revoked_accounts[:]
    request.revoked_accounts.extend(revoked_accounts())


def revoked_accounts() -> list[str]:
    """The ids of the service accounts deleted within ``MAX_TOKEN_LIFETIME_S`` (longer
    than any of their tokens lives), from the audit events their deletion wrote (in the
    same transaction), sorted."""
    since = timezone.now() - timedelta(seconds=settings.MAX_TOKEN_LIFETIME_S)
    deleted = AuditEvent.objects.filter(action=ACCOUNT_DELETED, created_at__gte=since).values_list(
        "before", flat=True
    )
    return sorted({str(before["uid"]) for before in deleted if before and before.get("uid")})
