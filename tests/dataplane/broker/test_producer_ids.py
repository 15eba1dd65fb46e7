"""Producer ids never repeat, even when a broker's data directory is lost: a new
directory starts its counter at the clock (ms since 2025), past every id an earlier life
of the broker handed out; a kept directory goes on past its reserved block. And a
transaction coordinator whose state log was lost starts its epoch at the clock (seconds
since 2025), past the epochs its earlier life stamped on markers."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from dataplane.broker.producer_ids import BLOCK_SIZE, COUNTER_BITS, ProducerIdAllocator
from dataplane.broker.txn.store import EPOCH_CLOCK_MS, TxnStatePartition
from dataplane.storage.manager import LogManager

JAN_2026_MS = 1_767_225_600_000


def counter(producer_id: int) -> int:
    return producer_id & ((1 << COUNTER_BITS) - 1)


def test_a_lost_data_directory_hands_out_none_of_its_earlier_ids(tmp_path: Path) -> None:
    now = [JAN_2026_MS]
    (tmp_path / "d").mkdir()
    first = ProducerIdAllocator(tmp_path / "d", 3, clock_ms=lambda: now[0])
    given = [first.next_id() for _ in range(2 * BLOCK_SIZE)]
    assert all(pid >> COUNTER_BITS == 3 for pid in given)
    now[0] += 5_000  # restarted: the kept file goes on past its block
    kept = ProducerIdAllocator(tmp_path / "d", 3, clock_ms=lambda: now[0])
    assert kept.next_id() > max(given)
    shutil.rmtree(tmp_path / "d")  # the volume is lost
    (tmp_path / "d").mkdir()
    reborn = ProducerIdAllocator(tmp_path / "d", 3, clock_ms=lambda: now[0])
    assert counter(reborn.next_id()) > counter(max(given))


def test_a_lost_state_log_starts_its_coordinator_epoch_past_the_old_ones(tmp_path: Path) -> None:
    async def epochs(now_ms: int) -> list[int]:
        manager = LogManager(tmp_path)
        manager.open()
        try:
            log = manager.get_or_create_log("__transaction_state", 0)
            store = TxnStatePartition(0, log, clock_ms=lambda: now_ms)
            store.replay()
            found = [await store.bump_epoch(), await store.bump_epoch()]
            await store.close()
            return found
        finally:
            manager.close()

    before = asyncio.run(epochs(JAN_2026_MS))
    assert before[0] == (JAN_2026_MS - EPOCH_CLOCK_MS) // 1000
    assert before[1] == before[0] + 1
    shutil.rmtree(tmp_path)
    after = asyncio.run(epochs(JAN_2026_MS + 60_000))
    assert after[0] > before[1]
