"""Pushing ``UpdateMetadata`` to every broker of a cluster at once.

Calls go through the gateway (``controlplane.gateway.admin.update_metadata``): they run
concurrently with a deadline each on the gateway's pooled channels, which reconnect
quickly; an answer is the broker's heartbeat, a failure a typed ``MeridianError``.

Every push also lists the platform's identities (``with_identities``): each tenant not
being deleted, with its immutable id, and the ids of the service accounts deleted within
``MAX_TOKEN_LIFETIME_S`` (from their audit events), so the brokers refuse a deleted
tenant's or service account's tokens from the next push on (within a controller tick)
rather than when the tokens expire. It lists every live tenant's lanes too
(``with_lanes``), so the brokers tell a missing lane topic of a declared lane (demanded)
from an undeclared lane (refused), and which lanes are live.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.core.choices import ProvisioningStatus
from controlplane.core.models import AuditEvent
from controlplane.gateway import admin
from controlplane.lanes.services import lane_declarations
from controlplane.regions.models import Broker
from controlplane.tenants.models import Tenant
from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.errors import ErrorCode, MeridianError

ACCOUNT_DELETED = "service_account.delete"


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

    def push(
        self, brokers: Iterable[Broker], request: admin_pb2.UpdateMetadataRequest
    ) -> dict[int, PushOutcome]:
        """``request`` (with the live identities) to every addressed broker; outcomes by
        ``Broker.pk``."""
        with_identities(request)
        with_lanes(request)
        addresses = {broker.pk: broker.address for broker in brokers if broker.address}
        answers = admin.update_metadata(addresses, request, timeout_s=self.timeout_s)
        return {pk: _outcome(answer) for pk, answer in answers.items()}


def _outcome(answer: admin_pb2.UpdateMetadataResponse | MeridianError) -> PushOutcome:
    if isinstance(answer, MeridianError):
        return PushOutcome(error=answer)
    return PushOutcome(response=answer)


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


def with_lanes(request: admin_pb2.UpdateMetadataRequest) -> None:
    """Set ``request``'s lanes: the complete set (``lanes_listed``), in a stable order."""
    del request.lanes[:]
    request.lanes.extend(lane_declarations())
    request.lanes_listed = True


def revoked_accounts() -> list[str]:
    """The ids of the service accounts deleted within ``MAX_TOKEN_LIFETIME_S`` (longer
    than any of their tokens lives), from the audit events their deletion wrote (in the
    same transaction), sorted."""
    since = timezone.now() - timedelta(seconds=settings.MAX_TOKEN_LIFETIME_S)
    deleted = AuditEvent.objects.filter(action=ACCOUNT_DELETED, created_at__gte=since).values_list(
        "before", flat=True
    )
    return sorted({str(before["uid"]) for before in deleted if before and before.get("uid")})
