"""The record accumulator: linger, batch size, bounded memory, flush and close."""

from __future__ import annotations

import threading
import time

import pytest

from dataplane.client.errors import BufferFull
from dataplane.errors import ErrorCode, MeridianError

from .support import accumulator, append_specs, drain_all

NOW = 1_700_000_000_000


def take_all(acc, now=None):  # type: ignore[no-untyped-def]
    return acc.drain(time.monotonic() if now is None else now, lambda tp, batch: True)


def test_an_open_batch_waits_for_linger() -> None:
    acc, topic = accumulator(linger_s=10.0)
    append_specs(acc, topic, [(None, b"v", NOW, [])])
    assert take_all(acc) == []
    assert not acc.has_ready(time.monotonic())
    deadline = acc.next_linger_deadline()
    assert deadline is not None
    assert deadline > time.monotonic() + 9
    (batch,) = take_all(acc, now=time.monotonic() + 10.5)
    assert batch.count == 1


def test_full_batches_are_ready_before_linger() -> None:
    acc, topic = accumulator(linger_s=10.0, batch_bytes=61 + 300)
    append_specs(acc, topic, [(None, b"x" * 90, NOW, [])] * 7)
    assert acc.has_ready(time.monotonic())
    ready = take_all(acc)
    assert [b.count for b in ready] == [3, 3]  # the third batch is still open
    assert take_all(acc) == []


def test_flush_and_close_make_open_batches_ready() -> None:
    acc, topic = accumulator(linger_s=10.0)
    append_specs(acc, topic, [(None, b"v", NOW, [])])
    assert len(drain_all(acc)) == 1
    append_specs(acc, topic, [(None, b"v", NOW, [])])
    acc.close()
    assert len(take_all(acc)) == 1
    with pytest.raises(MeridianError, match="closed"):
        append_specs(acc, topic, [(None, b"v", NOW, [])])


def test_drain_stops_a_partition_at_the_first_refusal() -> None:
    acc, topic = accumulator(batch_bytes=61 + 100)
    append_specs(acc, topic, [(None, b"x" * 90, NOW, [])] * 3)
    first = acc.drain(time.monotonic() + 1, lambda tp, batch: batch.result.tp.partition == 0)
    assert len(first) == 3
    append_specs(acc, topic, [(None, b"x" * 90, NOW, [])] * 2)
    assert acc.drain(time.monotonic() + 1, lambda tp, batch: False) == []
    assert len(take_all(acc, time.monotonic() + 1)) == 2


def test_memory_is_charged_and_released() -> None:
    acc, topic = accumulator()
    append_specs(acc, topic, [(None, b"x" * 100, NOW, [])] * 10)
    assert acc.used >= 1000
    (batch,) = drain_all(acc)
    acc.complete(batch, 0)
    assert acc.used == 0
    assert not acc.incomplete
    assert batch.result.done()
    assert batch.result.base_offset == 0


def test_buffer_full_fails_fast_without_blocking() -> None:
    acc, topic = accumulator(buffer_memory=1000, block_on_full=False)
    append_specs(acc, topic, [(None, b"x" * 400, NOW, [])] * 2)
    with pytest.raises(BufferFull, match="buffer_memory") as info:
        append_specs(acc, topic, [(None, b"x" * 400, NOW, [])])
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert info.value.retriable


def test_buffer_full_blocks_up_to_max_block_then_raises() -> None:
    acc, topic = accumulator(buffer_memory=1000, max_block_s=0.2)
    append_specs(acc, topic, [(None, b"x" * 400, NOW, [])] * 2)
    started = time.monotonic()
    with pytest.raises(BufferFull, match="max_block_ms"):
        append_specs(acc, topic, [(None, b"x" * 400, NOW, [])])
    assert time.monotonic() - started >= 0.2


def test_a_blocked_send_resumes_when_memory_is_released() -> None:
    acc, topic = accumulator(buffer_memory=1000, max_block_s=30)
    append_specs(acc, topic, [(None, b"x" * 400, NOW, [])] * 2)
    woken = threading.Event()
    acc.wakeup = woken.set
    done: list[object] = []
    thread = threading.Thread(
        target=lambda: done.append(append_specs(acc, topic, [(None, b"y" * 400, NOW, [])]))
    )
    thread.start()
    assert woken.wait(5), "a blocked send wakes the sender"
    assert acc.waiters == 1
    assert acc.has_ready(time.monotonic())
    for batch in take_all(acc):
        acc.complete(batch, 0)
    thread.join(5)
    assert done
    assert not thread.is_alive()


def test_a_fatal_error_refuses_appends_and_blocked_sends() -> None:
    acc, topic = accumulator(buffer_memory=1000, max_block_s=30)
    append_specs(acc, topic, [(None, b"x" * 900, NOW, [])])
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            append_specs(acc, topic, [(None, b"y" * 400, NOW, [])])
        except MeridianError as exc:
            errors.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.05)
    fatal = MeridianError(ErrorCode.INVALID_PRODUCER_EPOCH, "fenced")
    acc.refuse(fatal)
    thread.join(5)
    assert errors == [fatal]
    with pytest.raises(MeridianError, match="fenced"):
        append_specs(acc, topic, [(None, b"v", NOW, [])])


def test_expire_removes_old_queued_batches() -> None:
    acc, topic = accumulator(linger_s=100)
    append_specs(acc, topic, [(None, b"v", NOW, [])])
    assert acc.expire(time.monotonic(), 10) == []
    (expired,) = acc.expire(time.monotonic() + 11, 10)
    assert expired.count == 1
    assert take_all(acc, time.monotonic() + 200) == []
