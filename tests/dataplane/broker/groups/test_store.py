"""The records of __consumer_offsets and the partition store that replays them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.broker.groups import store as store_module
from dataplane.broker.groups.codec import (
    CodecError,
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetAndMetadata,
    OffsetKey,
    decode_group,
    decode_key,
    decode_offset,
    encode_group,
    encode_key,
    encode_offset,
)
from dataplane.broker.groups.coordinator import OFFSETS_LOG_CONFIG
from dataplane.broker.groups.store import OffsetsPartition
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.log import PartitionLog

texts = st.text(max_size=40)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
offset_values = st.builds(OffsetAndMetadata, int64s, texts, int32s, int64s)
members = st.builds(
    MemberRecord, texts, texts, texts, texts, int32s, int32s, st.binary(max_size=50)
)
group_values = st.builds(
    GroupRecord, texts, int32s, texts, texts, int64s, st.lists(members, max_size=4).map(tuple)
)
keys = st.one_of(st.builds(OffsetKey, texts, texts, int32s), st.builds(GroupKey, texts))


@given(keys)
def test_keys_round_trip(key: OffsetKey | GroupKey) -> None:
    assert decode_key(encode_key(key)) == key


@given(offset_values)
def test_offset_values_round_trip(value: OffsetAndMetadata) -> None:
    assert decode_offset(encode_offset(value)) == value


@given(group_values)
def test_group_values_round_trip(value: GroupRecord) -> None:
    assert decode_group(encode_group(value)) == value


@pytest.mark.parametrize(
    ("decode", "data"),
    [
        (decode_key, b"\x09abc"),  # unknown key type
        (decode_key, b"\x02\x00\x05ab"),  # string overruns
        (decode_key, encode_key(GroupKey("g")) + b"x"),  # trailing bytes
        (decode_offset, b"\x01" + encode_offset(OffsetAndMetadata(1))[1:]),  # unknown version
        (decode_offset, encode_offset(OffsetAndMetadata(1))[:-1]),  # truncated
        (decode_group, b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
        (decode_key, b"\x02\x00\x01\xff"),  # not UTF-8
    ],
)
def test_malformed_records_are_refused(decode: object, data: bytes) -> None:
    assert callable(decode)
    with pytest.raises(CodecError):
        decode(data)


def open_store(directory: Path, *, compact_min_records: int = 10_000) -> OffsetsPartition:
    log = PartitionLog.open(directory, OFFSETS_LOG_CONFIG)
    store = OffsetsPartition(0, log, clock_ms=lambda: 1, compact_min_records=compact_min_records)
    store.replay()
    return store


def state(store: OffsetsPartition) -> tuple[object, ...]:
    return (
        {g: store.offsets_of(g) for g in store.group_ids()},
        {g: store.group_record(g) for g in store.group_ids()},
    )


def test_replay_after_a_partial_snapshot_gives_the_same_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash while a snapshot is written leaves the old log start: nothing changes."""
    monkeypatch.setattr(store_module, "BATCH_BYTES", 100)
    store = open_store(tmp_path / "p")

    async def fill() -> None:
        for i in range(30):
            await store.write([(OffsetKey(f"g{i % 3}", "t", i % 7), OffsetAndMetadata(i))])
        await store.write([(GroupKey("g1"), GroupRecord("consumer", 4, "range", "m", 9, ()))])
        await store.write([(OffsetKey("g2", "t", 1), None)])

    asyncio.run(fill())
    before = state(store)
    batches = store._encode(store._live_entries())
    assert len(batches) > 2
    store.log.append(b"".join(batches[: len(batches) // 2]))
    store.log.close()
    assert state(open_store(tmp_path / "p")) == before


def test_compaction_keeps_the_state_and_drops_old_segments(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")

    async def churn() -> int:
        for i in range(100):
            await store.write([(OffsetKey("g", "t", i % 3), OffsetAndMetadata(i))])
        return await store.compact()

    start = asyncio.run(churn())
    before = state(store)
    assert store.log.log_start_offset == start == 100
    assert len(store.log.segments) == 1
    store.log.close()
    reopened = open_store(tmp_path / "p")
    assert state(reopened) == before
    reopened.log.close()


def test_concurrent_writes_share_appends_in_arrival_order(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")
    appends: list[int] = []
    append = store.log.append

    def counting(data: bytes, **kwargs: object) -> object:
        appends.append(len(data))
        return append(data, **kwargs)  # type: ignore[arg-type]

    store.log.append = counting  # type: ignore[method-assign]

    async def commit_all() -> None:
        key = OffsetKey("g", "t", 0)
        await asyncio.gather(*(store.write([(key, OffsetAndMetadata(i))]) for i in range(50)))

    asyncio.run(commit_all())
    assert store.offsets_of("g") == {("t", 0): OffsetAndMetadata(49)}
    assert len(appends) < 50
    store.log.close()
    assert open_store(tmp_path / "p").offsets_of("g")[("t", 0)].offset == 49


def test_a_record_too_large_fails_alone(tmp_path: Path) -> None:
    config = OFFSETS_LOG_CONFIG.with_changes(max_batch_bytes=4096)
    store = OffsetsPartition(0, PartitionLog.open(tmp_path / "p", config), clock_ms=lambda: 1)

    async def both() -> list[object]:
        huge = store.write([(OffsetKey("g", "t", 0), OffsetAndMetadata(1, "x" * 5000))])
        fine = store.write([(OffsetKey("g", "t", 1), OffsetAndMetadata(2))])
        return await asyncio.gather(huge, fine, return_exceptions=True)

    huge, fine = asyncio.run(both())
    assert isinstance(huge, MeridianError)
    assert huge.code == ErrorCode.INVALID_REQUEST
    assert fine is None
    assert store.offsets_of("g") == {("t", 1): OffsetAndMetadata(2)}
    store.log.close()
