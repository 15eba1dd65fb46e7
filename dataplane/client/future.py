"""Delivery futures: one cheap handle per record over one completion per batch.

``ProduceResult`` is completed once per batch by the sender thread (base offset and
log-append time, or the error). ``DeliveryFuture`` is what ``Producer.send`` returns: a
batch result plus the record's index and timestamp, two slots and no lock of its own, so
a send costs no condition variable. It offers the ``concurrent.futures.Future`` reading
methods (``result``, ``exception``, ``done``, ``add_done_callback``); a delivery cannot be
cancelled.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeAlias, overload

from dataplane.client.types import RecordMetadata, TopicPartition
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

DeliveryCallback: TypeAlias = Callable[[MeridianError | None, RecordMetadata | None], None]


class ProduceResult:
    """The outcome of one batch, set once; waiters block on an event."""

    __slots__ = (
        "_callbacks",
        "_event",
        "_lock",
        "base_offset",
        "error",
        "log_append_time",
        "parts",
        "tp",
    )

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.base_offset = -1
        self.log_append_time = -1
        self.error: MeridianError | None = None
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.parts: list[tuple[int, ProduceResult]] | None = None

    def split(self, counts: Sequence[int]) -> list[ProduceResult]:
        """The batch goes out as parts of ``counts`` records (the broker found it too
        large): their results. Each record's outcome is its part's (``part``); this
        result completes once every part has."""
        parts = [ProduceResult(self.tp) for _ in counts]
        self.parts = list(zip(itertools.accumulate(counts, initial=0), parts, strict=False))
        pending = [len(parts)]

        def part_done() -> None:
            with self._lock:
                pending[0] -= 1
                if pending[0]:
                    return
            errors = [part.error for part in parts if part.error is not None]
            self.complete(-1, -1, errors[0] if errors else None)

        for part in parts:
            part.add_callback(part_done)
        return parts

    def part(self, index: int) -> tuple[ProduceResult, int]:
        """The result holding record ``index`` of this batch, and its index there."""
        if self.parts is None:
            return self, index
        for start, part in reversed(self.parts):
            if index >= start:
                return part.part(index - start)
        return self, index

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def add_callback(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on completion (now, in this thread, if already complete)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        _run(fn)

    def complete(
        self, base_offset: int, log_append_time: int = -1, error: MeridianError | None = None
    ) -> None:
        """Set the outcome (only the first call counts) and run the callbacks."""
        with self._lock:
            if self._event.is_set():
                return
            self.base_offset, self.log_append_time, self.error = base_offset, log_append_time, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            _run(fn)


def _run(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        log.exception("a delivery callback raised")


class DeliveryFuture:
    """The delivery of one record: resolves to its ``RecordMetadata`` or a ``MeridianError``."""

    __slots__ = ("_index", "_result", "_timestamp")

    def __init__(self, result: ProduceResult, index: int, timestamp: int) -> None:
        self._result = result
        self._index = index
        self._timestamp = timestamp

    def done(self) -> bool:
        return self._result.done()

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._result.done()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds; raise the delivery error or ``TimeoutError``."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self.metadata()

    def exception(self, timeout: float | None = None) -> MeridianError | None:
        if not self._result.wait(timeout):
            raise TimeoutError(f"record not delivered within {timeout} s")
        return self._result.part(self._index)[0].error

    def metadata(self) -> RecordMetadata:
        """The record's metadata from its completed batch (offset -1 with ``acks=0``)."""
        result, index = self._result.part(self._index)
        offset = result.base_offset + index if result.base_offset >= 0 else -1
        append_time = result.log_append_time
        timestamp = append_time if append_time >= 0 else self._timestamp
        tp = result.tp
        return RecordMetadata(tp.topic, tp.partition, offset, timestamp, append_time)

    def add_done_callback(self, fn: Callable[[DeliveryFuture], object]) -> None:
        """Call ``fn(self)`` once delivered or failed, in the sender thread (or now)."""

        def done() -> None:
            fn(self)

        self._result.add_callback(done)

    def add_delivery_callback(self, fn: DeliveryCallback) -> None:
        """Call ``fn(error, metadata)``: exactly one of them is None."""

        def deliver() -> None:
            error = self._result.part(self._index)[0].error
            fn(error, None) if error is not None else fn(None, self.metadata())

        self._result.add_callback(deliver)

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._result.error else "done")
        tp = self._result.tp
        return f"DeliveryFuture({tp.topic}/{tp.partition} #{self._index}, {state})"


class Segment(NamedTuple):
    """Records ``start .. start + length - 1`` of a ``send_batch`` call (or, with
    ``positions``, the call's records at ``positions[start:start + length]``), which are
    records ``first .. first + length - 1`` of the batch completing ``result``."""

    result: ProduceResult
    first: int
    start: int
    length: int
    positions: list[int] | None


class DeliveryFutures(Sequence[DeliveryFuture]):
    """The deliveries of one ``send_batch`` call: a sequence of ``DeliveryFuture`` (one per
    record, in call order, made when asked for) and waits over all of them.

    ``result`` waits and returns every record's ``RecordMetadata`` or raises the first
    error; ``exception`` returns it (or None); ``errors`` every failed record's index and
    error; ``add_done_callback(fn)`` calls ``fn(self)`` once, when every record is
    delivered or failed. The waits cost one per batch the records went into, not one
    per record.
    """

    __slots__ = ("_futures", "_results", "_segments", "_size", "_timestamps")

    def __init__(self, segments: list[Segment], size: int, timestamps: Sequence[int]) -> None:
        self._segments = segments
        self._size = size
        self._timestamps = timestamps  # each record's (create) timestamp
        self._results = list({id(s.result): s.result for s in segments}.values())
        self._futures: list[DeliveryFuture] | None = None

    def _all(self) -> list[DeliveryFuture]:
        if self._futures is None:
            futures: list[DeliveryFuture | None] = [None] * self._size
            stamps = self._timestamps
            for result, first, start, count, positions in self._segments:
                at = range(start, start + count) if positions is None else positions[start:]
                for delta, index in zip(range(count), at, strict=False):
                    futures[index] = DeliveryFuture(result, first + delta, stamps[index])
            self._futures = futures  # type: ignore[assignment]
        return self._futures  # type: ignore[return-value]

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> DeliveryFuture: ...
    @overload
    def __getitem__(self, index: slice) -> list[DeliveryFuture]: ...
    def __getitem__(self, index: int | slice) -> DeliveryFuture | list[DeliveryFuture]:
        return self._all()[index]

    def done(self) -> bool:
        return all(result.done() for result in self._results)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for every record; True once all are done."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for result in self._results:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not result.wait(remaining):
                return False
        return True

    def exception(self, timeout: float | None = None) -> MeridianError | None:
        """The first error of the batches the records went into (None if all delivered);
        ``TimeoutError`` if not all are done within ``timeout`` seconds."""
        if not self.wait(timeout):
            raise TimeoutError(f"records not delivered within {timeout} s")
        return next((r.error for r in self._results if r.error is not None), None)

    def errors(self, timeout: float | None = None) -> list[tuple[int, MeridianError]]:
        """``(index in the call, error)`` of every record that failed, in call order."""
        if self.exception(timeout) is None:
            return []
        failed = ((i, f.exception()) for i, f in enumerate(self._all()))
        return [(i, error) for i, error in failed if error is not None]

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        """Every record's metadata, in call order; raises the first error (see
        ``errors`` for all of them) or ``TimeoutError``."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return [future.metadata() for future in self._all()]

    def add_done_callback(self, fn: Callable[[DeliveryFutures], object]) -> None:
        """Call ``fn(self)`` once every record is delivered or failed, in the sender
        thread (or now, if they all are)."""
        lock = threading.Lock()
        pending = [len(self._results)]

        def one_done() -> None:
            with lock:
                pending[0] -= 1
                if pending[0]:
                    return
            fn(self)

        def all_done() -> None:
            fn(self)

        if not self._results:
            _run(all_done)
        for result in self._results:
            result.add_callback(one_done)

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"DeliveryFutures({self._size} records in {len(self._results)} batches, {state})"


def failed_future(tp: TopicPartition, error: MeridianError) -> DeliveryFuture:
    """A future already failed with ``error``."""
    result = ProduceResult(tp)
    result.complete(-1, error=error)
    return DeliveryFuture(result, 0, -1)


def closed_error() -> MeridianError:
    return MeridianError(ErrorCode.INVALID_REQUEST, "the producer is closed")
