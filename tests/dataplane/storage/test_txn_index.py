"""The aborted-transaction index: collection rules, persistence, truncation and trimming,
checked against a plain list as the oracle."""

from __future__ import annotations

import random
from pathlib import Path

from dataplane.storage.txn_index import ENTRY_BYTES, INDEX_FILE, AbortedTxn, AbortedTxnIndex


def oracle_collect(entries: list[AbortedTxn], fetch: int, upper: int) -> set[AbortedTxn]:
    return {e for e in entries if e.last_offset >= fetch and e.first_offset < upper}


def random_entries(rng: random.Random, count: int) -> list[AbortedTxn]:
    """Transactions over a log: each starts somewhere, ends later; LSO as Kafka computes."""
    entries, open_txns, offset = [], {}, 0
    for pid in range(count * 2):
        offset += rng.randint(1, 5)
        open_txns[pid] = offset
        if rng.random() < 0.6 and len(open_txns) > 1:
            ended = rng.choice(sorted(open_txns))
            first = open_txns.pop(ended)
            offset += 1
            stable = min(open_txns.values(), default=offset + 1)
            entries.append(AbortedTxn(ended, first, offset, stable))
    return entries


def test_collect_returns_every_overlapping_abort_and_stops_early(tmp_path: Path) -> None:
    rng = random.Random(7)
    entries = random_entries(rng, 300)
    index = AbortedTxnIndex(tmp_path, entries)
    end = entries[-1].last_offset + 5
    for _ in range(500):
        fetch = rng.randint(0, end)
        upper = rng.randint(fetch, end + 1)
        found = index.collect(fetch, upper)
        # what a reader needs is there; anything more starts at or after the range end
        assert oracle_collect(entries, fetch, upper) == set(found)


def test_entries_survive_a_reopen_and_a_torn_tail_is_dropped(tmp_path: Path) -> None:
    index = AbortedTxnIndex.load(tmp_path)
    index.append(AbortedTxn(1, 10, 20, 21))
    index.append(AbortedTxn(2, 15, 30, 31))
    index.close()
    path = tmp_path / INDEX_FILE
    assert path.stat().st_size == 2 * ENTRY_BYTES
    with path.open("ab") as file:
        file.write(b"\x00" * 10)  # a write cut short by a crash
    reopened = AbortedTxnIndex.load(tmp_path)
    assert reopened.entries == [AbortedTxn(1, 10, 20, 21), AbortedTxn(2, 15, 30, 31)]
    assert path.stat().st_size == 2 * ENTRY_BYTES


def test_truncation_drops_entries_from_the_cut_on_disk_too(tmp_path: Path) -> None:
    index = AbortedTxnIndex.load(tmp_path)
    for i in range(5):
        index.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10 + 6))
    assert index.truncate_from(25) == 3  # the markers at 25, 35 and 45
    index.append(AbortedTxn(9, 26, 27, 28))  # appends continue after the cut
    assert [e.producer_id for e in AbortedTxnIndex.load(tmp_path).entries] == [0, 1, 9]


def test_trimming_forgets_entries_below_the_log_start(tmp_path: Path) -> None:
    index = AbortedTxnIndex.load(tmp_path)
    for i in range(4):
        index.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10 + 6))
    assert index.trim_before(16) == 2  # kept in memory until enough accumulate
    assert index.collect(16, 100) == [AbortedTxn(2, 20, 25, 26), AbortedTxn(3, 30, 35, 36)]
    assert index.trim_before(1000) == 4  # all below: rewritten empty
    assert AbortedTxnIndex.load(tmp_path).entries == []


def test_an_entry_out_of_order_is_refused(tmp_path: Path) -> None:
    index = AbortedTxnIndex.load(tmp_path)
    index.append(AbortedTxn(1, 1, 5, 6))
    try:
        index.append(AbortedTxn(2, 2, 5, 6))
    except ValueError:
        pass
    else:
        raise AssertionError("an entry at the same marker offset was accepted")
    assert len(index) == 1
