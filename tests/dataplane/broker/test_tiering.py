"""Tiered storage on a real broker process with a local-folder object store: sealed
segments upload and leave the local disk, reads from the start come back from the remote
tier, a SIGKILL mid-upload lists no partial object, an unreachable store holds local
retention back while produce goes on, and a damaged remote object is a typed error."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, common_pb2
from dataplane.errors import ErrorCode
from dataplane.records import Record, build_batch, decode_batches
from dataplane.tiered import layout, manifests
from dataplane.tiered.store import ObjectStore
from tests.dataplane.broker.support import (
    TIMEOUT_S,
    Stubs,
    create,
    fetch_records,
    produce,
    stubs,
    wait_for,
)
from tests.support.brokers import BrokerProcess, tiered_process

TOPIC = "acme.tiered"
# Small segments (about 10 batches each), and nothing kept locally once uploaded.
TIERED = {
    "remote_storage": True,
    "max_segment_bytes": 4096,
    "local_retention_bytes": 0,
    "topic_id": "7",
}


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "objects"


@pytest.fixture
def tiered_broker(
    tmp_path: Path, store_dir: Path, request: pytest.FixtureRequest
) -> Iterator[BrokerProcess]:
    with tiered_process(
        tmp_path / "broker-1", ["--remote-store-uri", str(store_dir)], request
    ) as process:
        yield process


def _values(start: int, count: int) -> list[bytes]:
    return [b"record-%06d-" % i + b"x" * 300 for i in range(start, start + count)]


def _produce_all(s: Stubs, values: list[bytes], per_batch: int = 1) -> None:
    for i in range(0, len(values), per_batch):
        result = produce(s, TOPIC, 0, build_batch(values[i : i + per_batch]))
        assert result.error == 0, result


def _state(s: Stubs) -> admin_pb2.PartitionState:
    response = s.admin.DescribeState(
        admin_pb2.DescribeStateRequest(topics=[TOPIC]), timeout=TIMEOUT_S
    )
    (state,) = response.partitions
    return state


def _earliest(s: Stubs) -> broker_pb2.ListOffsetsResult:
    request = broker_pb2.ListOffsetsRequest(
        partitions=[broker_pb2.ListOffsetsPartition(topic=TOPIC, partition=0, timestamp=-2)]
    )
    (result,) = s.broker.ListOffsets(request, timeout=TIMEOUT_S).results
    return result


def _check_manifest(store_dir: Path, *, topic_id: str = "7") -> layout.Manifest:
    """The latest manifest, after checking every listed object is whole (size and CRC)
    and the segments tile their offsets."""
    store = ObjectStore.open(str(store_dir))
    manifest = manifests.latest(store, TOPIC, topic_id, 0)
    previous_end = manifest.log_start_offset
    for segment in manifest.segments:
        assert segment.start_offset == previous_end, manifest
        previous_end = segment.end_offset
        for kind, (size, crc) in segment.files.items():
            data = store.get(segment.key(TOPIC, topic_id, 0, kind))
            assert (len(data), crc32c.crc32c(data)) == (size, crc), (segment, kind)
    return manifest


def test_sealed_segments_upload_leave_the_disk_and_read_back_from_the_start(
    tiered_broker: BrokerProcess, store_dir: Path
) -> None:
    values = _values(0, 300)
    with stubs(tiered_broker) as s:
        create(s, TOPIC, **TIERED)
        _produce_all(s, values)
        assert wait_for(lambda: _state(s).remote_end_offset >= 250, timeout_s=30)
        assert wait_for(lambda: _state(s).log_start_offset >= 200, timeout_s=30)
        state = _state(s)
        assert state.remote_segments >= 20
        assert state.remote_bytes > 0
        # What left the disk is stored once: only in the store.
        assert 0 < state.remote_only_bytes <= state.remote_bytes
        assert state.remote_log_start_offset == 0
        assert _earliest(s).offset == 0  # the first offset kept is the remote one
        stored = fetch_records(s, TOPIC, 0, 0)
    assert [r.value for r in stored] == values
    assert [r.offset for r in stored] == list(range(300))
    manifest = _check_manifest(store_dir)
    assert manifest.log_start_offset == 0
    assert manifest.end_offset >= state.remote_end_offset
    local = sorted(p.name for p in (tiered_broker.data_dir / f"{TOPIC}-0").glob("*.log"))
    assert len(local) < len(manifest.segments)  # most segments are only remote now


def test_the_same_against_an_s3_endpoint(
    tmp_path: Path, s3_store_uri: tuple[str, dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    """Uploads, local deletion and reads from the start with the store on S3 (moto's
    server); the credentials reach the broker in a private file."""
    uri, options = s3_store_uri
    options_file = tmp_path / "store.json"
    options_file.write_text(json.dumps(options))
    options_file.chmod(0o600)
    args = ["--remote-store-uri", uri, "--remote-store-options-file", str(options_file)]
    values = _values(0, 200)
    with tiered_process(tmp_path / "broker-1", args, request) as process, stubs(process) as s:
        create(s, TOPIC, **TIERED)
        _produce_all(s, values)
        assert wait_for(lambda: _state(s).log_start_offset >= 150, timeout_s=60)
        assert _earliest(s).offset == 0
        stored = fetch_records(s, TOPIC, 0, 0)
    assert [r.value for r in stored] == values
    manifest = manifests.latest(ObjectStore.open(uri, options), TOPIC, "7", 0)
    assert manifest.log_start_offset == 0
    assert manifest.end_offset >= 150


def test_reads_at_every_offset_below_the_local_log_start_start_at_that_offset(
    tiered_broker: BrokerProcess,
) -> None:
    values = _values(0, 120)
    with stubs(tiered_broker) as s:
        create(s, TOPIC, **TIERED)
        _produce_all(s, values, per_batch=3)
        assert wait_for(lambda: _state(s).log_start_offset >= 60, timeout_s=30)
        for offset in range(0, 60, 7):
            request = broker_pb2.FetchRequest(
                max_wait_ms=0,
                partitions=[
                    broker_pb2.FetchPartition(
                        topic=TOPIC, partition=0, fetch_offset=offset, partition_max_bytes=2000
                    )
                ],
            )
            (result,) = s.broker.Fetch(request, timeout=TIMEOUT_S).results
            assert result.error == 0, result
            assert result.log_start_offset == 0
            got = [r for r in decode_batches(result.records) if r.offset >= offset]
            assert got
            assert (got[0].offset, got[0].value) == (offset, values[offset])


def test_a_broker_killed_while_uploading_lists_no_partial_object_and_loses_nothing(
    tiered_broker: BrokerProcess, store_dir: Path
) -> None:
    values = _values(0, 400)
    with stubs(tiered_broker) as s:
        create(s, TOPIC, **TIERED)
        _produce_all(s, values[:200])
    for round_ in range(4):
        with stubs(tiered_broker) as s:
            if round_ == 1:
                _produce_all(s, values[200:])
            wanted = 5 * (round_ + 1)
            assert wait_for(lambda: _state(s).remote_segments > wanted, timeout_s=30)  # noqa: B023
        tiered_broker.kill()  # while it uploads the rest
        _check_manifest(store_dir)
        tiered_broker.restart()
    with stubs(tiered_broker) as s:
        assert wait_for(
            lambda: _state(s).upload_lag_ms == 0 and _state(s).remote_end_offset > 350, timeout_s=30
        )
        stored = fetch_records(s, TOPIC, 0, 0)
    assert [r.value for r in stored] == values
    store = ObjectStore.open(str(store_dir))

    def unlisted() -> set[str]:
        manifest = _check_manifest(store_dir)
        listed = {k for seg in manifest.segments for k in seg.keys(TOPIC, "7", 0)}
        stored = {o.key for o in manifests.segment_objects(store, TOPIC, "7", 0)}
        assert listed <= stored
        return stored - listed

    # Whatever an interrupted upload left is removed by the cleaner (grace: 1 s).
    assert wait_for(lambda: not unlisted(), timeout_s=30), unlisted()


def test_an_unreachable_store_holds_local_retention_and_produce_goes_on(
    tiered_broker: BrokerProcess, store_dir: Path
) -> None:
    values = _values(0, 300)
    with stubs(tiered_broker) as s:
        create(s, TOPIC, **TIERED)
        _produce_all(s, values[:50])
        assert wait_for(lambda: _state(s).remote_end_offset > 0, timeout_s=30)
        # The store's folder becomes a file: every call fails as an unreachable store would.
        shutil.move(store_dir, store_dir.with_name("away"))
        store_dir.write_text("not a folder")
        start_before = _state(s).log_start_offset
        _produce_all(s, values[50:250])
        assert wait_for(lambda: _state(s).upload_lag_ms > 1500, timeout_s=30)
        down = _state(s)
        assert down.log_start_offset == start_before  # nothing not uploaded is deleted
        assert down.size_bytes > 40_000
        metrics = tiered_broker_metrics(tiered_broker)
        assert "meridian_tier_failures_total" in metrics
        store_dir.unlink()
        shutil.move(store_dir.with_name("away"), store_dir)
        _produce_all(s, values[250:])
        assert wait_for(
            lambda: _state(s).upload_lag_ms == 0 and _state(s).log_start_offset > 200, timeout_s=60
        )
        stored = fetch_records(s, TOPIC, 0, 0)
    assert [r.value for r in stored] == values


def _fetch_until_error(
    s: Stubs, offset: int
) -> tuple[list[Record], broker_pb2.FetchPartitionResult]:
    """The records fetched from ``offset`` on until a fetch fails, and that failure."""
    got: list[Record] = []
    for _ in range(1000):
        request = broker_pb2.FetchRequest(
            max_wait_ms=0,
            partitions=[broker_pb2.FetchPartition(topic=TOPIC, partition=0, fetch_offset=offset)],
        )
        (result,) = s.broker.Fetch(request, timeout=TIMEOUT_S).results
        if result.error:
            assert not result.records
            return got, result
        records = [r for r in decode_batches(result.records) if r.offset >= offset]
        assert records, result
        got.extend(records)
        offset = records[-1].offset + 1
    raise AssertionError("no fetch failed")


def tiered_broker_metrics(process: BrokerProcess) -> str:
    import urllib.request

    with urllib.request.urlopen(process.metrics_url, timeout=TIMEOUT_S) as answer:
        return answer.read().decode()


def test_a_damaged_remote_segment_is_a_typed_error_never_wrong_data(
    tiered_broker: BrokerProcess, store_dir: Path
) -> None:
    values = _values(0, 200)
    with stubs(tiered_broker) as s:
        create(s, TOPIC, **TIERED)
        _produce_all(s, values)
        assert wait_for(lambda: _state(s).log_start_offset >= 100, timeout_s=30)
        manifest = _check_manifest(store_dir)
        first = manifest.segments[0]
        path = store_dir / first.key(TOPIC, "7", 0, "log")
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # a flipped bit inside a record
        path.write_bytes(bytes(data))
        second = manifest.segments[1]
        (store_dir / second.key(TOPIC, "7", 0, "log")).unlink()
        good, damaged = _fetch_until_error(s, first.start_offset)
        missing = _fetch_until_error(s, second.start_offset)[1]
        # Past the damaged ones everything still reads.
        later = fetch_records(s, TOPIC, 0, manifest.segments[2].start_offset)
    # The batches before the damaged one come back right; the damaged one never does.
    assert len(good) < first.end_offset - first.start_offset
    assert [r.value for r in good] == values[first.start_offset : first.start_offset + len(good)]
    assert damaged.error == ErrorCode.REMOTE_SEGMENT_CORRUPT
    assert missing.error == ErrorCode.REMOTE_SEGMENT_MISSING
    assert [r.value for r in later] == values[manifest.segments[2].start_offset :]


@pytest.mark.parametrize("new_id", ["8", "7"])
def test_a_topic_made_again_under_a_deleted_ones_name_never_serves_its_records(
    tiered_broker: BrokerProcess, new_id: str
) -> None:
    """With a new id the old objects are another folder's; with the old id (a caller
    that reused it) the manifest ends past the new log, so it is not trusted."""
    with stubs(tiered_broker) as s:
        create(s, TOPIC, **TIERED)
        _produce_all(s, _values(0, 200))
        assert wait_for(lambda: _state(s).log_start_offset >= 100, timeout_s=30)
        s.admin.DeletePartitions(
            admin_pb2.DeletePartitionsRequest(
                partitions=[common_pb2.TopicPartition(topic=TOPIC, partition=0)]
            ),
            timeout=TIMEOUT_S,
        )
        create(s, TOPIC, **{**TIERED, "topic_id": new_id})
        fresh = [b"fresh-%03d" % i + b"z" * 300 for i in range(60)]
        _produce_all(s, fresh)
        time.sleep(2)  # rounds of the tier manager (every 100 ms) acting on what it believes
        assert _earliest(s).offset == 0
        stored = fetch_records(s, TOPIC, 0, 0)
        state = _state(s)
    assert [r.value for r in stored] == fresh
    assert state.log_start_offset == 0 or state.remote_log_start_offset == 0
