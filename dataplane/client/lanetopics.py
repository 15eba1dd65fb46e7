"""Records waiting for their lane topic to exist (``LANE_TOPIC_PENDING``).

A lane topic is created on first use: a broker answers a produce or metadata request for
a missing lane topic of a declared lane with the retriable ``LANE_TOPIC_PENDING`` and the
control plane creates it within a second or two. Until then the producer cannot choose a
partition (the lane may have a partition count of its own), so records routed there are
parked here, in send order, each with a stand-in result its ``DeliveryFuture`` reads. A
thread of their own asks the metadata again every ``backoff_s`` (short: creation is
quick) and, once the topic exists, hands the records to the accumulator in order; sends
that come meanwhile are parked behind them, so a partition keeps its send order.
``LANE_NOT_FOUND`` is asked again for ``confirm_s`` after the topic's records started
waiting (a lane declared a moment ago reaches the brokers with the controller's next
push), then fails them; any other non-retriable answer fails them at once;
``delivery_timeout_s`` bounds the wait. Other topics are never held up. Parked records
take at most ``max_bytes`` (the producer's ``buffer_memory``): past it a send waits up to
``max_block_s`` for room, or raises ``BufferFullError`` at once when it must not block.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dataplane.client.errors import BufferFullError, LaneNotFoundError
from dataplane.client.future import DeliveryFuture, ProduceResult
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError, is_retriable

log = logging.getLogger(__name__)

# How often a pending lane topic is asked for again: creation aims at well under 2 s.
PENDING_BACKOFF_S = 0.075

# Hands a parked record (or ``send_batch`` call) to the accumulator now the topic exists;
# returns the real futures, in the order of the stand-ins.
Replay = Callable[[], list[DeliveryFuture]]


@dataclass
class _Parked:
    replay: Replay
    results: list[ProduceResult]
    size: int = 0


@dataclass
class _Waiting:
    since: float
    parked: list[_Parked] = field(default_factory=list)


def lane_error(topic: str, code: int, message: str) -> MeridianError:
    """The error a lane topic's records fail with: ``LaneNotFoundError`` for
    ``LANE_NOT_FOUND``, else a plain ``MeridianError``."""
    if code == ErrorCode.LANE_NOT_FOUND:
        return LaneNotFoundError.of_lane_topic(topic, message)
    return MeridianError(code, message)


def forward(real: DeliveryFuture, stand_in: ProduceResult) -> None:
    """Complete ``stand_in`` (a one-record result) with ``real``'s outcome."""

    def done() -> None:
        result, index = real._result.part(real._index)
        stand_in.tp = result.tp
        if result.error is not None:
            stand_in.complete(-1, error=result.error)
        else:
            offset = result.base_offset + index if result.base_offset >= 0 else -1
            stand_in.complete(offset, result.log_append_time)

    real._result.add_callback(done)


class PendingLaneTopics:
    """The producer's parked records, by lane topic (see the module docstring)."""

    def __init__(
        self,
        metadata: ClusterMetadata,
        *,
        delivery_timeout_s: float,
        max_bytes: int = 32 * 1024 * 1024,
        block: bool = True,
        max_block_s: float = 60.0,
        backoff_s: float = PENDING_BACKOFF_S,
        confirm_s: float = 3.0,
    ) -> None:
        self._metadata = metadata
        self._max_bytes = max_bytes
        self._block = block
        self._max_block_s = max_block_s
        self.parked_bytes = 0
        self._delivery_timeout_s = delivery_timeout_s
        self._backoff_s = backoff_s
        self._confirm_s = confirm_s
        self._lock = threading.Lock()
        self._waiting: dict[str, _Waiting] = {}
        self._wake = threading.Event()
        self._idle = threading.Condition(self._lock)  # notified as parked records leave
        self._thread: threading.Thread | None = None
        self._closed = False

    def stand_ins(self, topic: str, count: int) -> list[ProduceResult]:
        return [ProduceResult(TopicPartition(topic, -1)) for _ in range(count)]

    def park(
        self,
        topic: str,
        replay: Replay,
        results: list[ProduceResult],
        *,
        start: bool,
        size: int = 0,
    ) -> bool:
        """Queue ``replay`` (of records of about ``size`` bytes) behind what waits for
        ``topic``. When nothing waits for it, parks only if ``start`` (the caller just
        met ``LANE_TOPIC_PENDING``) and returns whether it parked."""
        with self._lock:
            waiting = self._waiting.get(topic)
            if waiting is None and (not start or self._closed):
                return False
            self._wait_for_room(size)
            waiting = self._waiting.get(topic)
            if waiting is None:
                if not start or self._closed:  # released while we waited for room
                    return False
                waiting = self._waiting[topic] = _Waiting(time.monotonic())
            waiting.parked.append(_Parked(replay, results, size))
            self.parked_bytes += size
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="meridian-lane-topics", daemon=True
                )
                self._thread.start()
        self._wake.set()
        return True

    def _wait_for_room(self, size: int) -> None:
        """With the lock held: wait until ``size`` more bytes fit (always, when nothing
        is parked), up to ``max_block_s``."""
        if not self.parked_bytes or self.parked_bytes + size <= self._max_bytes:
            return
        deadline = time.monotonic() + self._max_block_s
        while self.parked_bytes and self.parked_bytes + size > self._max_bytes:
            remaining = deadline - time.monotonic()
            if not self._block or remaining <= 0:
                raise BufferFullError(
                    f"records waiting for their lane topic fill buffer_memory "
                    f"({self.parked_bytes} of {self._max_bytes} bytes)"
                )
            self._idle.wait(remaining)

    def waiting(self, topic: str) -> bool:
        return topic in self._waiting

    def results(self) -> list[ProduceResult]:
        """The stand-in results of every parked record now."""
        with self._lock:
            return [r for w in self._waiting.values() for p in w.parked for r in p.results]

    def close(self, timeout: float | None, error: MeridianError) -> None:
        """Wait up to ``timeout`` seconds for the parked records to move on, then fail
        what is left with ``error``; parks nothing more."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._closed = True
            while self._waiting:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._idle.wait(remaining)
            left, self._waiting = self._waiting, {}
            self.parked_bytes = 0
            self._idle.notify_all()
        self._wake.set()
        for waiting in left.values():
            _fail(waiting, error)

    # -- the thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._backoff_s)
            self._wake.clear()
            time.sleep(self._backoff_s)  # creation takes a while: do not ask at once
            with self._lock:
                topics = list(self._waiting)
                if not topics and self._closed:
                    return
            if topics:
                self._check(topics)

    def _check(self, topics: list[str]) -> None:
        try:
            snapshot = self._metadata.refresh(topics)
        except MeridianError as error:  # no broker answered: ask again, within the timeout
            log.debug("lane topics %s: metadata refresh failed: %s", topics, error)
            snapshot = self._metadata.snapshot()
        now = time.monotonic()
        for topic in topics:
            if snapshot.leaders.get(topic):
                self._release(topic)
                continue
            code = snapshot.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            confirming = code == ErrorCode.LANE_NOT_FOUND
            if confirming and now - self._since(topic) < self._confirm_s:
                continue
            if not is_retriable(code):
                self._drop(topic, lane_error(topic, code, "refused by the broker"))
            elif now - self._since(topic) > self._delivery_timeout_s:
                self._drop(
                    topic,
                    MeridianError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"lane topic {topic!r} did not come into being within "
                        f"delivery_timeout_ms ({self._delivery_timeout_s * 1000:.0f} ms)",
                    ),
                )

    def _since(self, topic: str) -> float:
        waiting = self._waiting.get(topic)
        return time.monotonic() if waiting is None else waiting.since

    def _release(self, topic: str) -> None:
        """Hand the topic's records to the accumulator in order; holds the lock so a
        send meanwhile parks behind them, and goes straight through once they are in."""
        with self._lock:
            waiting = self._waiting.pop(topic, None)
            if waiting is None:
                return
            self.parked_bytes -= sum(p.size for p in waiting.parked)
            for parked in waiting.parked:
                try:
                    real = parked.replay()
                except MeridianError as error:
                    for result in parked.results:
                        result.complete(-1, error=error)
                    continue
                for future, stand_in in zip(real, parked.results, strict=True):
                    forward(future, stand_in)
            self._idle.notify_all()

    def _drop(self, topic: str, error: MeridianError) -> None:
        with self._lock:
            waiting = self._waiting.pop(topic, None)
            if waiting is not None:
                self.parked_bytes -= sum(p.size for p in waiting.parked)
            self._idle.notify_all()
        if waiting is not None:
            _fail(waiting, error)


def _fail(waiting: _Waiting, error: MeridianError) -> None:
    for parked in waiting.parked:
        for result in parked.results:
            result.complete(-1, error=error)
