"""The timer partition's due-time index and offset table against a sorted-list oracle."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dataplane.broker.delay import index as index_module
from dataplane.broker.delay.index import FAR_MS, DueIndex, OffsetTable

START = 1_700_000_000_000


class IndexMachine(RuleBasedStateMachine):
    """Adds, time passing and pops: every popped entry is due, in order, and each entry
    comes out exactly once; what stays is exactly what the oracle holds."""

    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self.index = DueIndex(self.now)
        self.oracle: list[tuple[int, int]] = []
        self.next_offset = 0

    @rule(ahead=st.integers(-5_000, 3 * 3600 * 1000))
    def add(self, ahead: int) -> None:
        due = self.now + ahead
        self.index.add(due, self.next_offset)
        self.oracle.append((due, self.next_offset))
        self.next_offset += 1

    @rule(ahead=st.sampled_from([0, 1, 249, 250, 999, FAR_MS - 1, FAR_MS, 7 * FAR_MS, 3600_000]))
    def same_time_burst(self, ahead: int) -> None:
        for _ in range(3):
            self.add(ahead)

    @rule(step=st.integers(0, 2 * FAR_MS), limit=st.integers(1, 50))
    def pass_time_and_pop(self, step: int, limit: int) -> None:
        self.now += step
        popped = self.index.pop_due(self.now, limit)
        due = sorted(e for e in self.oracle if e[0] <= self.now)
        assert popped == due[:limit]
        for entry in popped:
            self.oracle.remove(entry)

    @invariant()
    def holds_what_the_oracle_holds(self) -> None:
        assert len(self.index) == len(self.oracle)
        assert list(self.index.entries()) == sorted(self.oracle)
        if self.oracle:
            middle = sorted(self.oracle)[len(self.oracle) // 2]
            assert list(self.index.entries(middle)) == [
                e for e in sorted(self.oracle) if e > middle
            ]
        expected = min(self.oracle)[0] if self.oracle else None
        assert self.index.next_due() == expected


TestIndex = IndexMachine.TestCase
TestIndex.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_a_far_bucket_poured_in_pops_in_order() -> None:
    """Entries a day ahead come out in (due, offset) order once their time comes."""
    index = DueIndex(START)
    day = 24 * 3600 * 1000
    for offset, due in enumerate([START + day + 5, START + day + 1, START + day + 1, START + 1]):
        index.add(due, offset)
    assert index.pop_due(START + 10, 10) == [(START + 1, 3)]
    assert index.pop_due(START + day, 10) == []
    assert index.pop_due(START + day + 5, 10) == [
        (START + day + 1, 1),
        (START + day + 1, 2),
        (START + day + 5, 0),
    ]
    assert len(index) == 0
    assert index.next_due() is None


def test_entries_due_at_once_are_sorted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Draining entries all due at once, a round at a time, sorts their bucket once (not
    once per round); what is added meanwhile comes out first when it is due earliest."""
    sorts = []

    def counting(items, **kwargs):  # type: ignore[no-untyped-def]
        sorts.append(len(items))
        return sorted(items, **kwargs)

    monkeypatch.setattr(index_module, "sorted", counting, raising=False)
    index = DueIndex(START)
    count = 100_000
    for offset in range(count):
        index.add(START - 100 + offset % 50, offset)
    popped = []
    while len(index):
        popped += index.pop_due(START, 4000)
        if len(popped) == 40_000:
            index.add(START - 100, count)  # due at once, added while draining
    assert len(sorts) == 1
    assert popped[0] == (START - 100, 0)
    assert popped[40_000] == (START - 100, count)  # before what was left, all due later
    rest = popped[:40_000] + popped[40_001:]
    assert rest == sorted(rest)
    assert len(popped) == count + 1


def test_pending_entries_hold_no_object_each() -> None:
    """Entries take under 40 bytes each, index and table together, at the density of a
    million over 30 days (bench/messaging_delay.py measures a million in a broker)."""
    count = 100_000
    span = 3 * 24 * 3600 * 1000
    index = DueIndex(START)
    table = OffsetTable(0)
    tracemalloc.start()
    table.extend_to(count)
    for offset in range(count):
        index.add(START + (offset * 7919) % span, offset)
    used = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert used / count < 40, used


def test_the_offset_table_tracks_what_is_pending() -> None:
    table = OffsetTable(100)
    table.extend_to(120)
    for offset in range(100, 120):
        table.record(offset, "acme.a" if offset % 2 else "acme.b", offset)
    assert table.low_water() == 100
    assert table.finish(100)
    assert not table.finish(100)
    assert table.finish(101, cancelled=True)
    assert table.cancelled(101)
    assert not table.cancelled(100)
    assert table.low_water() == 102
    for offset in range(102, 118):
        table.finish(offset)
    assert table.low_water() == 118
    assert (table.topic_of(119), table.size_of(119)) == ("acme.a", 119)
    table.trim(118)
    assert table.base == 116
    assert table.done(111)
    assert table.done(116)
    assert not table.done(118)
    assert table.topic_of(119) == "acme.a"
    table.extend_to(130)
    assert table.topic_of(125) is None
    assert not table.done(125)
