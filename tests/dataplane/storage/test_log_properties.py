"""Property-based tests: a PartitionLog behaves like a sorted dict of offset -> record.

A hypothesis state machine appends, reads, looks up timestamps, truncates, applies
retention, advances the log start, reopens cleanly and recovers from crash copies, and
after every step compares the log with a simple oracle. Set
``MERIDIAN_PROPERTY_EXAMPLES`` for a deeper run than the suite's default.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dataplane import records
from dataplane.records import BatchBuilder, Compression
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog

from .support import ManualClock

values = st.one_of(st.none(), st.binary(max_size=300))
record_lists = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=20)), values, st.integers(-50, 200)),
    min_size=1,
    max_size=12,
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="logprop-"))
        self.clock = ManualClock()
        self.config = LogConfig(
            max_segment_bytes=2048,
            index_interval_bytes=128,
            durability=Durability.NEVER,
            retention_ms=-1,
        )
        self.generation = 0
        self.log = PartitionLog.open(self.root / "t-0", self.config, clock_ms=self.clock)
        self.oracle: dict[int, tuple[bytes | None, bytes | None, int]] = {}
        self.batches: list[tuple[int, int]] = []  # (base, last) of every stored batch
        self.start = 0
        self.end = 0
        self.next_ts = 1_000
        self.appended_since_open = False

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(items=record_lists, codec=st.sampled_from(list(Compression)))
    def append(self, items, codec) -> None:
        builder = BatchBuilder(compression=codec)
        for key, value, jitter in items:
            builder.append(value, key=key, timestamp=self.next_ts + jitter)
            self.next_ts += 7
        info = self.log.append(builder.build())
        self.appended_since_open = True
        assert info.base_offset == self.end
        for i, (key, value, jitter) in enumerate(items):
            self.oracle[self.end + i] = (key, value, self.next_ts - 7 * (len(items) - i) + jitter)
        self.batches.append((self.end, self.end + len(items) - 1))
        self.end += len(items)

    @rule(data=st.data(), max_bytes=st.integers(1, 5_000))
    def read(self, data, max_bytes) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        result = self.log.read(offset, max_bytes)
        if offset == self.end:
            assert result.data == b""
            return
        decoded = records.decode_batches(result.data)
        assert decoded, "a read below the LEO returns at least one batch"
        assert decoded[0].offset <= offset <= decoded[-1].offset or decoded[0].offset == offset
        wanted = [r for r in decoded if r.offset >= offset]
        assert [r.offset for r in wanted] == list(range(offset, result.next_offset))
        for r in wanted:
            assert (r.key, r.value, r.timestamp) == self.oracle[r.offset]

    @rule(data=st.data())
    def timestamp_lookup(self, data) -> None:
        target = data.draw(st.integers(900, self.next_ts + 300))
        live = [o for o in sorted(self.oracle) if o >= self.start]
        expected = next((o for o in live if self.oracle[o][2] >= target), None)
        assert self.log.offset_for_timestamp(target) == expected

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def truncate(self, data) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        new_end = self.log.truncate_to(offset)
        if offset <= self.start:
            assert new_end == offset
            self.oracle.clear()
            self.batches.clear()
            self.start = self.end = offset
            return
        holding = [b for b in self.batches if b[0] <= offset <= b[1]]
        expected_end = max(holding[0][0] if holding else offset, self.start)
        assert new_end == expected_end
        self.oracle = {o: v for o, v in self.oracle.items() if o < new_end}
        self.batches = [b for b in self.batches if b[1] < new_end]
        self.end = new_end

    @rule(limit=st.integers(0, 6_000))
    def retention_by_size(self, limit) -> None:
        self.log.update_config(self.config.with_changes(retention_bytes=limit))
        self.log.delete_retained_segments()
        self.log.update_config(self.config)
        segments = self.log.segments
        assert self.log.size_bytes - segments[0].size_bytes < limit or len(segments) == 1
        self._moved_start(self.log.log_start_offset)

    @rule(data=st.data())
    def advance_start(self, data) -> None:
        target = data.draw(st.integers(self.start, self.end))
        assert self.log.advance_log_start_offset(target) == target
        self._moved_start(target)

    def _moved_start(self, new_start: int) -> None:
        assert new_start >= self.start
        self.start = new_start
        self.oracle = {o: v for o, v in self.oracle.items() if o >= new_start}

    @rule()
    def reopen_clean(self) -> None:
        directory = self.log.directory
        self.log.close()
        self.log = PartitionLog.open(directory, clock_ms=self.clock)
        self.appended_since_open = False
        assert self.log.recovery.clean_shutdown

    @rule()
    def reopen_after_crash(self) -> None:
        self.generation += 1
        target = self.root / f"crash{self.generation}" / "t-0"
        shutil.copytree(self.log.directory, target)
        self.log.close()
        self.log = PartitionLog.open(target, clock_ms=self.clock)
        # A log never changed since its clean open still has its clean checkpoint.
        assert not (self.appended_since_open and self.log.recovery.clean_shutdown)
        self.appended_since_open = False
        assert self.log.recovery.truncated_bytes == 0
        assert not self.log.recovery.corrupt

    @invariant()
    def offsets_match(self) -> None:
        assert self.log.log_start_offset == self.start
        assert self.log.log_end_offset == self.end


LogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("MERIDIAN_PROPERTY_EXAMPLES", "40")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPartitionLogAgainstOracle = LogMachine.TestCase
