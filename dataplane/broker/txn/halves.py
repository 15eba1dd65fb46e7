"""Half messages (RocketMQ's transactional messages) on the transaction coordinator.

A half message is a transaction of its own: ``begin`` gives it a producer id of the
half-message kind (``producers.HALF_PRODUCER_BIT``, used once), epoch 0 and one
partition, ONGOING from the start; its producer then appends the record as a
transactional batch (the partition's leader verifies it with this coordinator, as any
transactional batch) and later ``end``s it: commit writes a commit marker and the record
becomes visible, rollback an abort marker and it never does. Until then no consumer sees
it, at either isolation level (``fetch.py``).

Check-back. The producers of a group keep a ``CheckBack`` stream to the group's
coordinator (``CheckBackHub``). A half message neither committed nor rolled back
``check_interval_ms`` after it began is asked about on one of those streams (round
robin over the connected producers, any of which may answer: the one that sent it may
be dead), and again every ``check_interval_ms``: a producer answers COMMIT or ROLLBACK
(decided), or UNKNOWN (its callback could not tell, or raised: asked again later). Each
check counts, also one due while no producer is connected; after ``max_checks`` the
half message gets its ``default_outcome``; so does one still undecided
``half_max_lifetime_ms`` after it began (a broker setting: a producer's interval and
checks cannot hold its partition's readers back longer). Every check is written to the coordinator's
log before it is sent, so a restarted coordinator goes on counting where it was.

Decisions: by the producer (``end``), a check-back answer, the default, or an operator
(``end(..., by="operator")``); the first decision wins, the same one again is a no-op,
the other is ``INVALID_TXN_STATE``. A decided half message is remembered for
``half_retention_ms`` (so a repeated commit is answered alike), then forgotten
(``HALF_MESSAGE_NOT_FOUND``).

Thread safety: the event loop's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable

from dataplane._gen.meridian.v1 import txn_pb2
from dataplane.broker.auth.authorizer import tenant_of
from dataplane.broker.producers import HALF_PRODUCER_BIT
from dataplane.broker.txn import state as rules
from dataplane.broker.txn.codec import half_transactional_id
from dataplane.broker.txn.coordinator import (
    CheckPartition,
    TransactionCoordinator,
    check_transactional_id,
)
from dataplane.broker.txn.state import HalfInfo, TxnMetadata, TxnState
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

MIN_CHECK_INTERVAL_MS = 100
MAX_CHECK_INTERVAL_MS = 24 * 3600 * 1000
MAX_CHECKS = 1000
MAX_KEY_BYTES = 4096
MAX_HEADER_BYTES = 16 * 1024
CHECK_QUEUE = 1024  # requests waiting for one producer's stream


class CheckBackMember:
    """One producer's open CheckBack stream: the requests waiting to be sent on it."""

    def __init__(self, group: str, client_id: str) -> None:
        self.group = group
        self.client_id = client_id
        self.requests: asyncio.Queue[txn_pb2.CheckBackRequest] = asyncio.Queue(CHECK_QUEUE)


class CheckBackHub:
    """The producers of each group connected on CheckBack streams."""

    def __init__(self) -> None:
        self._members: dict[str, list[CheckBackMember]] = {}
        self._turn = itertools.count()

    def connect(self, group: str, client_id: str) -> CheckBackMember:
        member = CheckBackMember(group, client_id)
        self._members.setdefault(group, []).append(member)
        return member

    def disconnect(self, member: CheckBackMember) -> None:
        members = self._members.get(member.group, [])
        if member in members:
            members.remove(member)
        if not members:
            self._members.pop(member.group, None)

    def connected(self, group: str) -> int:
        return len(self._members.get(group, []))

    def ask(self, group: str, request: txn_pb2.CheckBackRequest) -> bool:
        """Queue ``request`` for one connected producer of ``group`` (round robin, those
        with room); False when none can take it."""
        members = self._members.get(group, [])
        start = next(self._turn)
        for i in range(len(members)):
            member = members[(start + i) % len(members)]
            try:
                member.requests.put_nowait(request)
                return True
            except asyncio.QueueFull:
                continue
        return False


class HalfMessages:
    """The half messages of the coordinator's partitions (module docstring)."""

    def __init__(
        self,
        core: TransactionCoordinator,
        hub: CheckBackHub,
        new_producer_id: Callable[[], int],
        check_partition: CheckPartition,
    ) -> None:
        self.core = core
        self.hub = hub
        self._new_producer_id = new_producer_id
        self._check_partition = check_partition
        self._clock_ms = core.clock_ms
        core.on_tick = self.tick
        # tenant -> undecided half messages here: counted at each tick, plus those begun
        # since (``half_max_open_per_tenant``)
        self._open: dict[str, int] = {}

    async def begin(
        self,
        group: str,
        topic: str,
        partition: int,
        *,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes]] = (),
        check_interval_ms: int = 0,
        max_checks: int = 0,
        default_commit: bool | None = None,
        client_id: str = "",
    ) -> TxnMetadata:
        """A new half message of ``group`` for ``topic``-``partition``."""
        check_transactional_id(group)
        config = self.core.config
        interval = check_interval_ms or config.half_check_interval_ms
        checks = max_checks or config.half_max_checks
        kept_headers = tuple((str(k), bytes(v)) for k, v in headers)
        _check_half(interval, checks, key, kept_headers)
        tenant = tenant_of(group) or ""
        if self._open.get(tenant, 0) >= config.half_max_open_per_tenant:
            raise MeridianError(
                ErrorCode.QUOTA_EXCEEDED,
                f"tenant {tenant!r} has {config.half_max_open_per_tenant} undecided half "
                "messages at this coordinator (the brokers' half_max_open_per_tenant): "
                "decide some first",
            )
        refused = await self._check_partition(topic, partition)
        if refused is not None:
            raise refused
        self.core.loaded(group)  # NOT_COORDINATOR before an id is spent
        counter = await asyncio.to_thread(self._new_producer_id)
        producer_id = HALF_PRODUCER_BIT | counter
        half_id = f"{counter:x}"
        now = self._clock_ms()
        default = config.half_default_commit if default_commit is None else default_commit
        half = HalfInfo(
            group, half_id, key, kept_headers, interval, checks, default, client_id,
            next_check_ms=now + interval,
        )  # fmt: skip
        transactional_id = half_transactional_id(group, half_id)
        meta = TxnMetadata(
            transactional_id,
            producer_id,
            0,
            interval * checks,
            TxnState.ONGOING,
            frozenset({(topic, partition)}),
            start_ms=now,
            last_update_ms=now,
            half=half,
        )
        async with self.core.locked(transactional_id) as loaded:
            changed = await self.core.change(loaded, meta)
        self._open[tenant] = self._open.get(tenant, 0) + 1
        return changed

    async def end(
        self, group: str, half_id: str, commit: bool, *, by: str = "producer"
    ) -> TxnMetadata:
        """Decide a half message; returns it once its markers are written (or as it is
        after the coordinator's ``complete_wait_ms``)."""
        transactional_id = half_transactional_id(group, half_id)
        async with self.core.locked(transactional_id) as loaded:
            meta = loaded.store.get(transactional_id)
            if meta is None or meta.half is None:
                raise MeridianError(
                    ErrorCode.HALF_MESSAGE_NOT_FOUND,
                    f"producer group {group!r} has no half message {half_id!r}",
                )
            decided = rules.decide_half(meta, commit, by, self._clock_ms())
            if decided is not meta:
                await self.core.change(loaded, decided)
                self.core.metrics.resolved(commit, by)
        return await self.core.settled(transactional_id)

    def list(self, group: str | None = None) -> list[TxnMetadata]:
        found = self.core.transactions(halves=True)
        return [m for m in found if group is None or (m.half is not None and m.half.group == group)]

    async def answer(self, group: str, answer: txn_pb2.CheckBackAnswer) -> None:
        """A producer's answer to a check-back."""
        if answer.error_message:
            self.core.metrics.checked("error")
            log.info(
                "%r: the check-back callback of half message %s raised: %s",
                group,
                answer.half_id,
                answer.error_message,
            )
            return
        if answer.outcome == txn_pb2.HALF_UNKNOWN:
            self.core.metrics.checked("unknown")
            return
        commit = answer.outcome == txn_pb2.HALF_COMMIT
        self.core.metrics.checked("commit" if commit else "rollback")
        try:
            await self.end(group, answer.half_id, commit, by="check-back")
        except MeridianError as error:  # decided meanwhile, or forgotten: nothing to do
            log.info("%r: a check-back answer for %s: %s", group, answer.half_id, error)

    # -- the schedule ------------------------------------------------------------------
    async def tick(self, now: int) -> None:
        undecided = self.core.transactions([TxnState.ONGOING], halves=True)
        counts: dict[str, int] = {}
        for meta in undecided:
            assert meta.half is not None
            tenant = tenant_of(meta.half.group) or ""
            counts[tenant] = counts.get(tenant, 0) + 1
        self._open = counts
        for meta in undecided:
            assert meta.half is not None
            if meta.half.next_check_ms <= now or self._outlived(meta, now):
                await self._check(meta.transactional_id, now)

    def _outlived(self, meta: TxnMetadata, now: int) -> bool:
        """Undecided for the broker's ``half_max_lifetime_ms``: whatever its producer asked
        (interval and checks), it gets its default outcome now."""
        return now - meta.start_ms >= self.core.config.half_max_lifetime_ms

    async def _check(self, transactional_id: str, now: int) -> None:
        async with self.core.locked(transactional_id) as loaded:
            meta = loaded.store.get(transactional_id)
            if meta is None or meta.half is None or not meta.open:
                return
            outlived = self._outlived(meta, now)
            if meta.half.next_check_ms > now and not outlived:
                return
            if meta.half.checks >= meta.half.max_checks or outlived:
                commit = meta.half.default_commit
                await self.core.change(loaded, rules.decide_half(meta, commit, "default", now))
                self.core.metrics.resolved(commit, "default")
                return
            checked = await self.core.change(loaded, rules.checked(meta, now))
        request = txn_pb2.CheckBackRequest(
            half_message=half_message(checked),
            check_number=checked.half.checks if checked.half else 0,
        )
        if not self.hub.ask(meta.half.group, request):
            self.core.metrics.checked("no_producer")


def _check_half(
    interval_ms: int, max_checks: int, key: bytes | None, headers: tuple[tuple[str, bytes], ...]
) -> None:
    if not MIN_CHECK_INTERVAL_MS <= interval_ms <= MAX_CHECK_INTERVAL_MS:
        raise MeridianError(
            ErrorCode.INVALID_REQUEST,
            f"check_interval_ms {interval_ms} is outside "
            f"[{MIN_CHECK_INTERVAL_MS}, {MAX_CHECK_INTERVAL_MS}]",
        )
    if not 1 <= max_checks <= MAX_CHECKS:
        raise MeridianError(
            ErrorCode.INVALID_REQUEST, f"max_checks {max_checks} is outside [1, {MAX_CHECKS}]"
        )
    if key is not None and len(key) > MAX_KEY_BYTES:
        raise MeridianError(
            ErrorCode.INVALID_REQUEST, f"a half message's key is at most {MAX_KEY_BYTES} bytes"
        )
    if sum(len(k) + len(v) for k, v in headers) > MAX_HEADER_BYTES:
        raise MeridianError(
            ErrorCode.INVALID_REQUEST,
            f"a half message's headers are at most {MAX_HEADER_BYTES} bytes",
        )


def half_message(meta: TxnMetadata) -> txn_pb2.HalfMessage:
    """The wire form of a half message's metadata."""
    half = meta.half
    assert half is not None
    ((topic, partition),) = meta.partitions or {("", -1)}
    return txn_pb2.HalfMessage(
        producer_group=half.group,
        half_id=half.half_id,
        topic=topic,
        partition=partition,
        key=half.key or b"",
        headers=[txn_pb2.HalfHeader(key=k, value=v) for k, v in half.headers],
        state=int(meta.state),  # type: ignore[arg-type]
        created_ms=meta.start_ms,
        checks=half.checks,
        max_checks=half.max_checks,
        next_check_ms=half.next_check_ms if meta.open else -1,
        default_outcome=txn_pb2.HALF_COMMIT if half.default_commit else txn_pb2.HALF_ROLLBACK,
        client_id=half.client_id,
        resolved_by=half.resolved_by,
    )
