"""The producer's background sender: one thread running an asyncio loop.

Each pass takes the ready batches from the accumulator and groups them by leader
broker into ``ProduceRequest`` s (one batch per partition per request, up to
``max_request_bytes``), which go pipelined over that broker's ``ProduceStream``, up to
``max_in_flight`` requests at a time (``link.py``).

Ordering and retries. Per partition, the batches sent and not yet acknowledged are
``PartitionState.pending``, in send order. A batch that fails with a retriable code (or
a transport error) is resent, after an exponential backoff with jitter, only once
nothing of its partition is in flight any more, and then before any newer batch, so
the broker sees the partition's batches in order. With idempotence (the default) each
batch carries the producer id, epoch and a base sequence, assigned when it is first
sent and kept on retries, so the broker answers a batch it already stored as a
duplicate with its original offset. ``OUT_OF_ORDER_SEQUENCE_NUMBER`` for a batch that
follows one being retried is expected and retried too (so is ``UNKNOWN_PRODUCER_ID``:
the broker knows no producer whose first batch it has not stored yet); for the first
unacknowledged
batch it is retried after a metadata refresh (the broker that answered may be a former
leader whose log is behind); at the last attempt it fails like a batch whose outcome
is unknown (below). ``UNKNOWN_PRODUCER_ID`` for the first unacknowledged batch (the
leader lost the producer's state: the topic was made anew) fails it and asks for a new
epoch. When a batch fails for good and the broker did not store it, the
sequences of the partition's later batches move down to close the gap (unless
``close_gaps`` is off: then the partition stops, see ``_give_up``). When the
outcome of a sent batch is unknown (the stream broke and the batch then ran out of
time), the later batches of its partition fail with it and the producer asks for a new
epoch, which restarts every partition's sequences, once nothing is left in flight.

A hung leader. A broker that stops answering (a frozen process, a partition of the
network) keeps its stream open, so its requests would wait for ``request_timeout_ms``.
While a request has been unanswered for ``STALLED_AFTER_S``, the sender refreshes the
metadata every ``STALLED_REFRESH_S`` (asking other brokers first); once the metadata
names another leader for a partition of a stalled request, the idempotent producer
abandons the stream (as at a request timeout: the outcome is unknown) and resends its
batches, in order and with the same producer id, epoch and sequences, to the new
leader, which answers a batch the old one had replicated as a duplicate. So writes
resume about when the controller moves the leadership, not when the broker wakes.

A transactional producer (``config.transactional_id``; ``transactions.py``). Its id and
epoch come from the transaction manager (``init_transactions``), never from the sender.
A batch is placed only once its partition is in the open transaction
(``TxnHooks.addable``): partitions met for the first time are added in the background,
all those of one pass in one AddPartitionsToTxn (``TxnHooks.add``), and their batches go
at the next pass after. Batches are sealed transactional and requests name the
transactional id. A batch that fails for good, or whose outcome is unknown, makes the
transaction abortable (``TxnHooks.failed``) instead of asking for a new epoch: the
abort does that. ``PRODUCER_FENCED`` is fatal, as ``INVALID_PRODUCER_EPOCH`` is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client.accumulator import RecordAccumulator
from dataplane.client.batch import ProducerBatch
from dataplane.client.inflight import (
    SEQUENCE_MASK,
    PartitionState,
    Planner,
    ProducerIdentity,
    SenderConfig,
)
from dataplane.client.lanetopics import lane_error
from dataplane.client.link import BrokerLink, InFlight
from dataplane.client.metadata import ClusterMetadata, ClusterSnapshot
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

MAX_PENDING_PER_PARTITION = 5  # what a broker remembers to deduplicate, as in Kafka
# An acks=all answer takes milliseconds unless a replica is slow or the leader hangs:
# past this, look for a new leader (a refresh is one small RPC to another broker).
STALLED_AFTER_S = 1.0
STALLED_REFRESH_S = 0.25
_REFRESH_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.LANE_TOPIC_PENDING,  # the lane topic is being made, or deleted
    }
)


class TxnHooks(Protocol):
    """What the sender asks of a transactional producer's transaction manager."""

    def addable(self, tp: TopicPartition) -> bool:
        """Whether ``tp`` is in the open transaction (else it is noted to be added)."""
        ...

    def refusal(self) -> MeridianError | None:
        """Why no batch can join the transaction now (it failed), or None."""
        ...

    async def add(self) -> None:
        """Add the partitions noted since the last call (on the sender's loop)."""
        ...

    def failed(self, error: MeridianError) -> None:
        """A batch of the transaction failed for good: it can only be aborted."""
        ...


class Sender:
    def __init__(
        self,
        accumulator: RecordAccumulator,
        metadata: ClusterMetadata,
        config: SenderConfig,
        on_metadata: Callable[[], None],
    ) -> None:
        self._acc = accumulator
        self._metadata = metadata
        self._config = config
        self._on_metadata = on_metadata
        self._states: dict[TopicPartition, PartitionState] = {}
        self._stopped: dict[TopicPartition, MeridianError] = {}  # close_gaps off
        self._resend: set[PartitionState] = set()
        self._links: dict[str, BrokerLink] = {}
        self._identity = ProducerIdentity()
        self.txn: TxnHooks | None = None  # a transactional producer's manager
        self._adding: asyncio.Task[None] | None = None
        self._bump_wanted = False
        self._pid_task: asyncio.Task[None] | None = None
        self._refresh_wanted = False
        self._refresh_task: asyncio.Task[None] | None = None
        self._last_refresh = 0.0
        self._refresh_started = 0.0  # when the last refresh began (monotonic)
        self._correlation = 0
        self._abort_error: MeridianError | None = None
        self.fatal: MeridianError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"meridian-sender-{config.client_id}", daemon=True
        )

    # -- thread control (any thread) -----------------------------------------------------
    def start(self) -> None:
        self._acc.sender_thread = self._thread
        self._acc.wakeup = self.wakeup
        self._thread.start()
        self._started.wait()

    def wakeup(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(wake.set)

    def abort(self, error: MeridianError) -> None:
        """Fail everything not yet delivered with ``error`` and stop."""
        self._abort_error = error
        self.wakeup()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._main(loop))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    # -- the loop ------------------------------------------------------------------------
    async def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wake = wake = asyncio.Event()
        self._loop = loop
        self._started.set()
        try:
            while not (self._acc.closed and not self._acc.incomplete):
                wake.clear()
                if self._abort_error is not None:
                    self._fail_everything(self._abort_error)
                    break
                now = time.monotonic()
                self._housekeeping(now)
                if self._ready_to_stamp():
                    self._send(now)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self._sleep_s(now))
        except Exception as exc:
            log.exception("the producer's sender failed")
            self._fail_everything(MeridianError(ErrorCode.UNKNOWN_SERVER_ERROR, repr(exc)))
        finally:
            self._loop = None
            await self._shutdown()

    async def _shutdown(self) -> None:
        """End every task on this loop before it closes: a task destroyed while pending,
        or whose exception nobody retrieved, is printed on the application's stderr."""
        for task in (self._pid_task, self._refresh_task, self._adding):
            if task is not None:
                task.cancel()
        for link in self._links.values():
            await link.close()
        # What gRPC itself left running gets a moment to end, then is cancelled.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if others:
            _, pending = await asyncio.wait(others, timeout=1.0)
            for task in pending:
                task.cancel()
            await asyncio.wait(others, timeout=1.0)
            for task in others:
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: what failed there was reported already

    def _sleep_s(self, now: float) -> float:
        # Deadlines already past belong to batches waiting for room or a leader: a
        # response, a refresh or the short poll below wakes the loop for those.
        deadlines = [now + 1.0]
        linger = self._acc.next_linger_deadline()
        if linger is not None and linger > now:
            deadlines.append(linger)
        deadlines += [s.retry_at for s in self._resend if s.retry_at > now]
        for link in self._links.values():
            if link.inflight:
                deadlines.append(link.inflight[0].sent_at + self._config.request_timeout_s)
                stalled_at = link.inflight[0].sent_at + STALLED_AFTER_S
                if stalled_at > now:
                    deadlines.append(stalled_at)
            if link.ready_at > now:
                deadlines.append(link.ready_at)
        if self._acc.incomplete:
            deadlines.append(now + 0.05)  # a leader may appear, a backoff may end
        refresh_at = self._last_refresh + STALLED_REFRESH_S
        if refresh_at > now and self._stalled(now):
            deadlines.append(refresh_at)
        return max(0.0, min(deadlines) - now)

    def _housekeeping(self, now: float) -> None:
        config = self._config
        refresh_due = now - self._last_refresh >= config.retry_backoff_s
        if self._stalled(now) and now - self._last_refresh >= STALLED_REFRESH_S:
            self._refresh_wanted = True  # the leader may have moved away from a hung broker
        if self._refresh_wanted and self._refresh_task is None and refresh_due:
            self._refresh_wanted = False
            self._refresh_task = self._spawn(self._refresh())
        pid_wanted = self._identity.producer_id < 0 or (self._bump_wanted and self._quiet())
        own_pid = config.idempotent and not config.transactional_id
        if own_pid and self._pid_task is None and pid_wanted:
            self._pid_task = self._spawn(self._init_producer_id())
        for link in self._links.values():
            if link.inflight and now - link.inflight[0].sent_at > config.request_timeout_s:
                link.reset(
                    MeridianError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"no answer from {link.address} within request_timeout_ms",
                    )
                )
        self._expire(now)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine)
        task.add_done_callback(_report_failure)
        return task

    def _stalled(self, now: float) -> list[BrokerLink]:
        """Links whose oldest request has waited past ``STALLED_AFTER_S``."""
        return [
            link
            for link in self._links.values()
            if link.inflight and now - link.inflight[0].sent_at > STALLED_AFTER_S
        ]

    def _abandon_moved(self) -> None:
        """Abandon the streams of stalled requests for which the fresh metadata names
        another leader; their batches are retried there (see the module docstring).
        Only with idempotence: without it a resend may store a record twice."""
        if not self._config.idempotent:
            return
        snapshot = self._metadata.snapshot()
        for link in self._stalled(time.monotonic()):
            moved = _moved_away(link, snapshot)
            if moved is not None:
                log.info("%s stopped answering; %s", link.address, moved)
                link.reset(MeridianError(ErrorCode.NOT_LEADER_OR_FOLLOWER, moved))

    def _ready_to_stamp(self) -> bool:
        if not self._config.idempotent:
            return True
        return self._identity.producer_id >= 0 and self._pid_task is None

    def set_identity(self, producer_id: int, epoch: int) -> None:
        """A transactional producer's id and epoch (from its transaction manager, while
        nothing is in flight): every partition's sequences restart at 0."""

        def install() -> None:
            self._identity.producer_id, self._identity.epoch = producer_id, epoch
            for state in self._states.values():
                state.next_sequence = 0
            self._poke()

        self.call_on_loop(install)

    def call_on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the sender's thread and return what it returns (blocking)."""
        loop = self._loop
        if loop is None:
            return fn()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return future.result()

    def in_flight(self) -> int:
        """Batches sent and not answered yet, and batches waiting to be sent again."""
        return sum(len(state.pending) for state in self._states.values())

    def drop_unsent(self, error: MeridianError) -> bool:
        """Fail every batch not in flight (queued, or waiting to be sent again) with
        ``error`` (an aborted transaction's); True when one of them had a sequence (the
        producer's sequences then need a new epoch). Runs on the sender's thread."""
        stamped = False
        for state in self._states.values():
            for batch in [b for b in state.pending if not b.in_flight]:
                stamped = True
                state.pending.remove(batch)
                self._acc.complete(batch, -1, error=error)
            if not state.pending:
                self._resend.discard(state)
        for batch in self._acc.take_all():
            self._acc.complete(batch, -1, error=error)
        return stamped

    def _quiet(self) -> bool:
        return not any(state.pending for state in self._states.values())

    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self._states.get(tp)
        if state is None:
            state = self._states[tp] = PartitionState(tp)
        return state

    def _backoff(self, attempts: int) -> float:
        base: float = self._config.retry_backoff_s * 2.0 ** max(0, attempts - 1)
        return min(base, self._config.retry_backoff_max_s) * random.uniform(0.8, 1.2)

    # -- sending -------------------------------------------------------------------------
    def _send(self, now: float) -> None:
        planner = Planner(self._metadata.snapshot(), self._link, self._config, now)
        txn = self.txn
        for state in list(self._resend):
            self._plan_resend(state, now, planner)
        if not self._bump_wanted:
            refused = txn.refusal() if txn is not None else None

            def take(tp: TopicPartition, batch: ProducerBatch) -> bool:
                if tp in self._stopped or refused is not None:
                    return True
                if txn is not None and not txn.addable(tp):
                    return False
                return self._place(tp, batch, planner)

            for batch in self._acc.drain(now, take):
                stopped = self._stopped.get(batch.tp) or refused
                if stopped is not None:
                    self._acc.complete(batch, -1, error=stopped)
                else:
                    self._stamp(batch)
        self._refresh_wanted |= planner.leaderless
        if txn is not None and (self._adding is None or self._adding.done()):
            self._adding = self._spawn(self._add_partitions(txn))
        for plan in planner.plans.values():
            for batches in plan.requests:
                if batches:
                    self._send_request(plan.link, batches)

    async def _add_partitions(self, txn: TxnHooks) -> None:
        try:
            await txn.add()
        finally:
            self._poke()

    def _plan_resend(self, state: PartitionState, now: float, planner: Planner) -> None:
        if now < state.retry_at or state.in_flight():
            return
        plan = planner.plan_for(state.tp)
        if plan is None:
            return
        waiting = [batch for batch in state.pending if not batch.in_flight]
        for batch in waiting:
            if not plan.add(batch):
                return
            if batch.sealed is None:
                self._seal(batch, batch.base_sequence)
        self._resend.discard(state)

    def _place(self, tp: TopicPartition, batch: ProducerBatch, planner: Planner) -> bool:
        state = self._state(tp)
        if state in self._resend:
            return False
        if self._config.idempotent and len(state.pending) >= MAX_PENDING_PER_PARTITION:
            return False
        plan = planner.plan_for(tp)
        if plan is None or not plan.add(batch):
            return False
        state.pending.append(batch)  # keeps the per-partition cap exact within a pass
        return True

    def _link(self, address: str) -> BrokerLink:
        link = self._links.get(address)
        if link is None:
            security = self._metadata.pool.security
            link = BrokerLink(address, self._on_response, self._on_failure, security)
            self._links[address] = link
        return link

    def _stamp(self, batch: ProducerBatch) -> None:
        """Give a new batch its sequence (if idempotent) and seal it."""
        state = self._states[batch.tp]
        sequence = -1
        if self._config.idempotent:
            sequence = state.next_sequence
            state.next_sequence = (sequence + batch.count) & SEQUENCE_MASK
        self._seal(batch, sequence)

    def _seal(self, batch: ProducerBatch, sequence: int) -> None:
        batch.resequenced = False
        if self._config.idempotent:
            batch.seal(
                self._config.compression,
                self._identity.producer_id,
                self._identity.epoch,
                sequence,
                transactional=bool(self._config.transactional_id),
            )
        else:
            batch.seal(self._config.compression)

    def _send_request(
        self, link: BrokerLink, batches: dict[tuple[str, int], ProducerBatch]
    ) -> None:
        self._correlation += 1
        partitions = []
        for (topic, partition), batch in batches.items():
            batch.in_flight = True
            batch.attempts += 1
            partitions.append(
                broker_pb2.PartitionRecords(
                    topic=topic, partition=partition, records=batch.sealed or b""
                )
            )
        request = broker_pb2.ProduceRequest(
            acks=self._config.acks,
            timeout_ms=int(self._config.request_timeout_s * 1000),
            partitions=partitions,
            correlation_id=self._correlation,
            transactional_id=self._config.transactional_id,
        )
        link.send(request, InFlight(self._correlation, dict(batches)))

    # -- outcomes ------------------------------------------------------------------------
    def _on_response(
        self, link: BrokerLink, entry: InFlight, response: broker_pb2.ProduceResponse
    ) -> None:
        link.failures = 0
        if response.throttle_ms > 0:  # counted from the send: the broker held the answer
            link.ready_at = max(link.ready_at, entry.sent_at + response.throttle_ms / 1000)
        for result in response.results:
            batch = entry.batches.pop((result.topic, result.partition), None)
            if batch is None or batch.result.done():
                continue
            if result.error == ErrorCode.NONE:
                self._succeeded(batch, result.base_offset, result.log_append_time_ms)
            else:
                error = lane_error(result.topic, result.error, result.error_message)
                timed_out = result.error == ErrorCode.REQUEST_TIMED_OUT  # it may have landed
                self._failed(batch, error, stored=None if timed_out else False)
        for batch in entry.batches.values():
            error = MeridianError(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker left it unanswered")
            self._failed(batch, error, stored=None)
        self._poke()

    def _on_failure(self, link: BrokerLink, entry: InFlight, error: MeridianError) -> None:
        link.failures += 1
        link.ready_at = time.monotonic() + self._backoff(link.failures)
        self._refresh_wanted = True
        if error.code == ErrorCode.UNAUTHENTICATED and link.failures == 1:
            # A broker ends a stream whose token expired (or whose account is gone) before
            # reading its next request: the next stream carries the token source's
            # current token. Refused again right away, the credentials are dead: final.
            error = MeridianError(
                ErrorCode.BROKER_NOT_AVAILABLE, f"reopening the stream: {error.message}"
            )
        for batch in entry.batches.values():
            if not batch.result.done():
                self._failed(batch, error, stored=None if error.retriable else False)
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _succeeded(self, batch: ProducerBatch, base_offset: int, append_time: int) -> None:
        batch.in_flight = False
        self._states[batch.tp].pending.remove(batch)
        if self._config.acks == 0:
            base_offset = -1  # answered before the append: no offset is known
        self._acc.complete(batch, base_offset, append_time if append_time > 0 else -1)

    def _failed(self, batch: ProducerBatch, error: MeridianError, *, stored: bool | None) -> None:
        """``stored``: False when the broker surely did not store it, None when unknown."""
        batch.in_flight = False
        state = self._states[batch.tp]
        code = error.code
        retriable = error.retriable
        gap = False
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self._config.idempotent:
            # For the first unacknowledged batch this is a gap at the broker that
            # answered, which may not lead any more: a broker restarted from the
            # leadership it saved, or resumed after a pause, answers from a log behind
            # the real leader's until the controller reaches it. So retry it after a
            # metadata refresh, as Kafka's idempotent producer does; only a gap that
            # outlives every attempt gives up (see below).
            gap = not (batch.resequenced or state.pending.index(batch) > 0)
            retriable = True
            self._refresh_wanted = True
        elif code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            self._fatal(error)
            return
        elif code == ErrorCode.UNKNOWN_PRODUCER_ID and self._config.idempotent:
            if state.pending.index(batch) > 0 or batch.resequenced:
                # An earlier batch of the partition is being retried: the broker has not
                # stored this producer's first batch yet, so it does not know the
                # producer. Expected, as OUT_OF_ORDER is above: retried in order.
                retriable = True
            else:
                self._want_bump(error)  # the leader lost this producer's state
        elif code == ErrorCode.MESSAGE_TOO_LARGE and batch.count > 1:
            self._split(state, batch)
            return
        if code in _REFRESH_CODES or stored is None:
            self._refresh_wanted = True
        now = time.monotonic()
        out_of_time = now - batch.created > self._config.delivery_timeout_s
        if not retriable or batch.attempts > self._config.retries or out_of_time:
            # A gap that outlived every attempt is the real leader's: the later batches
            # fail too and a new epoch restarts the sequences (Kafka's KIP-360).
            self._give_up(state, batch, error, unknown=stored is None or gap)
            return
        batch.retry_at = now + self._backoff(batch.attempts)
        state.retry_at = max(state.retry_at, batch.retry_at)
        self._resend.add(state)

    def fail_topic(self, topic: str, error: MeridianError) -> None:
        """Fail every batch of ``topic`` that is not in flight (queued, or waiting to be
        resent) with ``error``: the brokers refuse the topic for good (its lane is gone),
        so the batches must not wait for a leader until ``delivery_timeout_ms``. Batches
        in flight get their answers; batches made after the refresh that read the
        refusal began are left alone (the lane may be back). Runs on the sender's thread
        (a metadata callback)."""
        cutoff = self._refresh_started
        for batch in self._acc.take_topic(topic, cutoff):
            self._acc.complete(batch, -1, error=error)
        for tp, state in list(self._states.items()):
            if tp.topic != topic:
                continue
            waiting = [b for b in state.pending if not b.in_flight and b.created < cutoff]
            for batch in waiting:
                state.pending.remove(batch)
                self._acc.complete(batch, -1, error=error)
            if not state.pending:
                self._resend.discard(state)
            if waiting and self._config.idempotent:
                # Their sequences were given out: a new epoch restarts them (once
                # nothing is in flight), as after any batch failed for good.
                self._want_bump(error)

    def _split(self, state: PartitionState, batch: ProducerBatch) -> None:
        """The broker refused the batch as too large: send its halves instead, in its
        place (and sequences), as Kafka's producer does; a single record is not split."""
        parts = batch.split()
        state.replace(batch, parts)
        self._acc.replace(batch, parts)
        state.retry_at = time.monotonic()
        self._resend.add(state)

    def _give_up(
        self, state: PartitionState, batch: ProducerBatch, error: MeridianError, *, unknown: bool
    ) -> None:
        """``batch`` failed for good. Without ``close_gaps`` the partition stops: its
        later batches (in flight, waiting, queued or sent later) fail too, so nothing
        lands after the failed records, for the rest of the producer's life."""
        later = state.remove(batch)
        self._acc.complete(batch, -1, error=error)
        if self.txn is not None:
            self.txn.failed(error)
        reason = MeridianError(error.code, f"{error.message} (an earlier batch failed)")
        stop = not self._config.close_gaps
        if stop:
            self._stopped.setdefault(state.tp, reason)
        if not self._config.idempotent and not stop:
            return
        if not unknown and not stop:
            state.close_gap(batch.count, later)
            return
        for other in later:
            state.pending.remove(other)
            self._acc.complete(other, -1, error=reason)
        self._resend.discard(state)
        if self._config.idempotent and unknown:
            self._want_bump(error)

    def _want_bump(self, error: MeridianError) -> None:
        """The sequences need a new epoch: asked for here, or, in a transaction, by its
        abort (the transaction can only be aborted now)."""
        if self.txn is not None:
            self.txn.failed(error)
        else:
            self._bump_wanted = True

    def _expire(self, now: float) -> None:
        timeout = self._config.delivery_timeout_s
        for batch in self._acc.expire(now, timeout):
            error = MeridianError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{batch.count} records not sent within delivery_timeout_ms "
                f"({timeout * 1000:.0f} ms) to {batch.tp.topic}/{batch.tp.partition}",
            )
            self._acc.complete(batch, -1, error=error)
        for state in list(self._resend):
            waiting = [b for b in state.pending if not b.in_flight]
            if waiting and now - waiting[0].created > timeout and not state.in_flight():
                error = MeridianError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"not acknowledged within delivery_timeout_ms ({timeout * 1000:.0f} ms)",
                )
                self._give_up(state, waiting[0], error, unknown=waiting[0].attempts > 0)

    def fail_all(self, error: MeridianError) -> None:
        """A fatal error (on the sender's thread): everything fails, and every later send."""
        self._fatal(error)

    def _fatal(self, error: MeridianError) -> None:
        self.fatal = error
        self._acc.refuse(error)
        self._fail_everything(error)

    def _fail_everything(self, error: MeridianError) -> None:
        for state in self._states.values():
            for batch in state.pending:
                self._acc.complete(batch, -1, error=error)
            state.pending.clear()
        self._resend.clear()
        for batch in self._acc.take_all():
            self._acc.complete(batch, -1, error=error)
        for batch in self._acc.pending():
            self._acc.complete(batch, -1, error=error)

    # -- producer id and metadata --------------------------------------------------------
    async def _init_producer_id(self) -> None:
        bump = self._identity.producer_id >= 0
        attempts = 0
        try:
            while self._abort_error is None:
                try:
                    await self._request_producer_id(bump)
                    return
                except MeridianError as error:
                    if not error.retriable:
                        self._fatal(error)
                        return
                    log.info("no producer id yet: %s", error)
                attempts += 1
                self._refresh_wanted = True
                await asyncio.sleep(self._backoff(attempts))
        finally:
            self._pid_task = None
            self._poke()

    async def _request_producer_id(self, bump: bool) -> None:
        snapshot = self._metadata.snapshot()
        addresses = [b.address for b in snapshot.brokers.values()] or self._metadata.pool.bootstrap
        stub = self._link(random.choice(addresses)).stub
        await self._identity.request(stub, self._config.request_timeout_s, bump=bump)
        if bump:
            for state in self._states.values():
                state.next_sequence = 0
            self._bump_wanted = False

    async def _refresh(self) -> None:
        self._refresh_started = time.monotonic()
        topics = list(self._acc.topics)
        suspects = [link.address for link in self._stalled(time.monotonic())]
        try:
            await asyncio.to_thread(self._metadata.refresh, topics, avoid=suspects)
            self._on_metadata()
            self._abandon_moved()
        except MeridianError as error:
            log.info("metadata refresh failed: %s", error)
        finally:
            self._last_refresh = time.monotonic()
            self._refresh_task = None
            self._poke()


def _moved_away(link: BrokerLink, snapshot: ClusterSnapshot) -> str | None:
    """Why ``link``'s requests wait in vain (a partition of theirs is led by another
    broker now, by ``snapshot``), or None."""
    for entry in link.inflight:
        for topic, partition in entry.batches:
            leader = snapshot.leaders.get(topic, {}).get(partition, -1)
            broker = snapshot.brokers.get(leader)
            if broker is not None and broker.address != link.address:
                return f"{topic}/{partition} is led by broker {leader} ({broker.address}) now"
    return None


def _report_failure(task: asyncio.Task[None]) -> None:
    """Log what ended a task of the sender unexpectedly (its own errors it handles),
    instead of asyncio's "Task exception was never retrieved" at collection."""
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("the producer's sender: %s failed", task.get_coro(), exc_info=error)
