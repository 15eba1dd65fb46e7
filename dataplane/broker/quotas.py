"""Tenant quotas in the broker (DESIGN decision 8): rates by token buckets, storage by refusal.

Quotas come in the controller's push (``UpdateMetadataRequest.quotas``, the complete set:
a tenant not listed, and a rate of 0, are unlimited). ``QuotaManager`` reads the push it
is given on every use and re-applies the quotas whenever a new push was accepted, so the
persisted push loaded at start applies too. Rates are per broker, as Kafka's quotas.

Rates. Per tenant and per kind (``produce`` bytes, ``fetch`` bytes, ``requests``) a
``TokenBucket`` holds at most ``BURST_S`` seconds of its rate and refills continuously.
Usage is charged *after* the work (the bytes appended or returned, one request per
call); the bucket may go into debt, and ``debt / rate`` is the call's throttle time: the
broker holds the response that long (an ``asyncio`` sleep of that call alone: other
tenants' calls are never delayed, nothing is dropped) and reports it as ``throttle_ms``
in Produce and Fetch responses. As with Kafka's muted connections, later responses of
the same ProduceStream wait behind a held one (they leave in order). A response is held
at most ``max_hold_ms`` (the broker's ``quota_max_hold_ms``, 10 s by default), below the
SDK's 30 s request timeout, so a held answer never times out at a default client; the
debt stays, so the next calls are held too, and ``throttle_ms`` carries the whole
throttle time. ``throttle_ms`` counts from when the request was *sent*: the broker has
already held the response for it, so a client honouring it waits only for what a capped
hold left (until ``sent_at + throttle_ms``), never twice.

A call is also held *before* it runs while a bucket it claims is in debt (``admit``:
the produce bytes of its request and one request, for each tenant it names and the
caller acts for), counting calls admitted but not yet charged, so many concurrent calls
of one tenant are let in one after another at its rate rather than all doing their work
at once. What a call waited there shortens its response's hold (the two together are at
most ``max_hold_ms``) and is part of its ``throttle_ms``.

The tenant of a topic or group is the prefix of its name (``<tenant>.<name>``); internal
topics (``__*``) have none. Only calls of the client-facing services are throttled
(``QuotaInterceptor``); Admin, Replication and health calls never are. A tenant is
charged only for what succeeded: bytes of partitions without error, one request per call
for each tenant with at least one partition (or group) answered without error, so a
call naming another tenant's topics and refused cannot spend that tenant's quota.

Storage. When the push says a tenant's ``storage_exceeded``, Produce to its partitions
is answered per partition with ``QUOTA_EXCEEDED`` and the push's ``storage_message``
(not retriable); nothing is written (``storage_refusal``, checked before the append).

Metrics (on the broker's Prometheus registry):
``meridian_broker_throttle_seconds_total{tenant}`` (time responses were held),
``meridian_broker_throttled_requests_total{tenant,quota}`` (responses held, by the quota
that decided it) and ``meridian_broker_quota_refusals_total{tenant}`` (partitions
refused for storage).

Thread safety: event-loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.broker.auth.authorizer import tenant_of
from dataplane.errors import ErrorCode, MeridianError

BURST_S = 1.0  # a full bucket holds one second of its rate
MAX_HOLD_MS = 10_000  # default longest time one response is held; the rest stays owed
PRODUCE, FETCH, REQUESTS = "produce", "fetch", "requests"
KINDS = (PRODUCE, FETCH, REQUESTS)

Clock = Callable[[], float]  # monotonic seconds
PushSource = Callable[[], "admin_pb2.UpdateMetadataRequest | None"]


class TokenBucket:
    """``rate_per_s`` tokens per second, at most ``burst_s`` seconds of them stored.

    ``charge(amount)`` takes tokens whether or not there are enough (the balance may go
    negative: debt) and returns the seconds until the balance is back to zero (0 when
    none is owed). A new rate keeps the balance (capped to the new burst).
    """

    def __init__(self, rate_per_s: float, clock: Clock, burst_s: float = BURST_S) -> None:
        if rate_per_s <= 0:
            raise ValueError(f"rate_per_s must be > 0, got {rate_per_s}")
        self._clock = clock
        self._burst_s = burst_s
        self.rate_per_s = float(rate_per_s)
        self.tokens = self.capacity
        self._updated = clock()

    @property
    def capacity(self) -> float:
        return self.rate_per_s * self._burst_s

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._updated)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate_per_s)
        self._updated = now

    def charge(self, amount: float) -> float:
        """Take ``amount`` tokens; the throttle time in seconds (debt / rate)."""
        self._refill()
        self.tokens -= amount
        return max(0.0, -self.tokens) / self.rate_per_s

    def owed_s(self, pending: float = 0.0) -> float:
        """Seconds until the balance, less ``pending`` tokens not yet charged, is back to
        zero (0 when nothing is owed); takes nothing."""
        self._refill()
        return max(0.0, pending - self.tokens) / self.rate_per_s

    def set_rate(self, rate_per_s: float) -> None:
        self._refill()
        self.rate_per_s = float(rate_per_s)
        self.tokens = min(self.tokens, self.capacity)


@dataclass(frozen=True)
class Throttle:
    """The outcome of charging one call: how long to hold it, and why."""

    seconds: float = 0.0
    tenant: str = ""
    kind: str = ""

    @property
    def ms(self) -> int:
        return min(2**31 - 1, int(self.seconds * 1000 + 0.999))  # rounded up


class QuotaMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        kwargs: dict[str, Any] = {"registry": registry}
        self.throttle_seconds = Counter(
            "meridian_broker_throttle_seconds",
            "Time responses were held for a tenant's rate quota",
            ["tenant"],
            **kwargs,
        )
        self.throttled = Counter(
            "meridian_broker_throttled_requests",
            "Responses held for a tenant's rate quota, by the quota that decided",
            ["tenant", "quota"],
            **kwargs,
        )
        self.refusals = Counter(
            "meridian_broker_quota_refusals",
            "Partitions of produce requests refused because the tenant's storage is full",
            ["tenant"],
            **kwargs,
        )


class QuotaManager:
    """The quotas of the last accepted push, their buckets, and the holds they impose."""

    def __init__(
        self,
        pushed: PushSource,
        *,
        registry: CollectorRegistry | None = None,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], Any] = asyncio.sleep,
        max_hold_ms: int = MAX_HOLD_MS,
    ) -> None:
        """``pushed()`` returns the controller's last accepted push (or None)."""
        self._pushed = pushed
        self._max_hold_s = max_hold_ms / 1000
        self._clock = clock
        self._sleep = sleep
        self._applied: object = None
        self.quotas: dict[str, admin_pb2.TenantQuota] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._pending: dict[tuple[str, str], float] = {}  # admitted, not yet charged
        self.metrics = QuotaMetrics(registry)

    # -- the push ----------------------------------------------------------------------
    def _sync(self) -> None:
        current = self._pushed()
        if current is not self._applied:
            self._applied = current
            self.apply(current.quotas if current is not None else ())

    def apply(self, quotas: Iterable[admin_pb2.TenantQuota]) -> None:
        """Make ``quotas`` the complete set: buckets of unlisted tenants and of rates
        now unlimited go; a changed rate keeps its bucket's balance."""
        self.quotas = {q.tenant: q for q in quotas}
        for (tenant, kind), bucket in list(self._buckets.items()):
            rate = self._rate(tenant, kind)
            if rate <= 0:
                del self._buckets[(tenant, kind)]
            elif rate != bucket.rate_per_s:
                bucket.set_rate(rate)

    def _rate(self, tenant: str, kind: str) -> int:
        quota = self.quotas.get(tenant)
        if quota is None:
            return 0
        return int(getattr(quota, f"{kind}_bytes_per_s" if kind != REQUESTS else "requests_per_s"))

    # -- storage ---------------------------------------------------------------------
    def storage_refusal(self, topic: str) -> MeridianError | None:
        """``QUOTA_EXCEEDED`` when ``topic``'s tenant is over its storage quota."""
        self._sync()
        tenant = tenant_of(topic)
        quota = self.quotas.get(tenant) if tenant is not None else None
        if quota is None or not quota.storage_exceeded:
            return None
        self.metrics.refusals.labels(tenant).inc()
        message = quota.storage_message or f"tenant {tenant!r} is over its storage quota"
        return MeridianError(ErrorCode.QUOTA_EXCEEDED, message)

    # -- rates -----------------------------------------------------------------------
    async def admit(self, claims: dict[tuple[str, str], int]) -> float:
        """Hold a call before it runs while a bucket it claims ((tenant, kind) -> the
        amount it expects to use) is in debt, counting calls admitted but not yet charged
        (so calls arriving together are let in one after another, at the rate); at most
        ``max_hold_ms`` in all. Then reserve the claims until ``release``. Returns the
        seconds waited."""
        self._sync()
        waited_s, owing = 0.0, ""
        while waited_s < self._max_hold_s:
            owed_s, tenant = self._owed(claims)
            if owed_s <= 0:
                break
            step_s = min(owed_s, self._max_hold_s - waited_s)
            owing = tenant
            await self._sleep(step_s)
            waited_s += step_s
            self._sync()
        for key, amount in claims.items():
            self._pending[key] = self._pending.get(key, 0.0) + amount
        if waited_s > 0:
            self.metrics.throttle_seconds.labels(owing).inc(waited_s)
        return waited_s

    def _owed(self, claims: dict[tuple[str, str], int]) -> tuple[float, str]:
        worst, owing = 0.0, ""
        for key in claims:
            bucket = self._buckets.get(key)
            if bucket is not None:
                owed_s = bucket.owed_s(self._pending.get(key, 0.0))
                if owed_s > worst:
                    worst, owing = owed_s, key[0]
        return worst, owing

    def release(self, claims: dict[tuple[str, str], int]) -> None:
        """Drop the reservation ``admit`` made for ``claims`` (the call is done)."""
        for key, amount in claims.items():
            left = self._pending.get(key, 0.0) - amount
            if left > 1e-9:
                self._pending[key] = left
            else:
                self._pending.pop(key, None)

    def charge(self, usage: dict[tuple[str, str], int], waited_s: float = 0.0) -> Throttle:
        """Charge ``usage`` ((tenant, kind) -> amount) and return the longest throttle
        it caused; records it in the metrics when there is one. ``waited_s``: how long
        ``admit`` already held the call (it shortens the response's hold)."""
        self._sync()
        worst = Throttle()
        for (tenant, kind), amount in usage.items():
            rate = self._rate(tenant, kind)
            if rate <= 0 or amount <= 0:
                continue
            bucket = self._buckets.get((tenant, kind))
            if bucket is None:
                bucket = self._buckets[(tenant, kind)] = TokenBucket(rate, self._clock)
            seconds = bucket.charge(amount)
            if seconds > worst.seconds:
                worst = Throttle(seconds, tenant, kind)
        if worst.seconds > 0:
            self.metrics.throttle_seconds.labels(worst.tenant).inc(self.hold_s(worst, waited_s))
            self.metrics.throttled.labels(worst.tenant, worst.kind).inc()
        return worst

    def hold_s(self, throttle: Throttle, waited_s: float = 0.0) -> float:
        """How long a response with ``throttle`` is held: the throttle time, capped so
        that with the ``waited_s`` the call was held before running it is at most
        ``max_hold_ms``."""
        return max(0.0, min(throttle.seconds, self._max_hold_s - waited_s))

    async def hold(self, throttle: Throttle, waited_s: float = 0.0) -> None:
        """Delay the caller (one call) by ``throttle``'s hold time."""
        hold_s = self.hold_s(throttle, waited_s)
        if hold_s > 0:
            await self._sleep(hold_s)

    def bucket(self, tenant: str, kind: str) -> TokenBucket | None:
        return self._buckets.get((tenant, kind))
