"""A store that does not answer: reads raise RemoteStoreUnavailableError (retriable),
never a missing or corrupt segment, and never wait for long."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.local import free_ports
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.reader import TopicStoreReader
from dataplane.tiered.remote_log import RemoteLogReader
from dataplane.tiered.store import ObjectStore, RemoteStoreUnavailableError
from tests.support.s3 import S3Endpoint

from .support import PARTITION, TOPIC, TOPIC_ID, make_batches, tiered_partition

APPENDED = make_batches(60)


def test_a_store_that_stops_answering_raises_unavailable(tmp_path: Path) -> None:
    endpoint = S3Endpoint(log_path=tmp_path / "moto.log").start()
    try:
        uri, options = endpoint.bucket()
        store = ObjectStore.open(uri, options)
        manifest = tiered_partition(store, tmp_path / "log", APPENDED)
        remote = RemoteLogReader(store, cache_bytes=1 << 20)
        assert remote.read(manifest, 0, 100).data
        standalone = TopicStoreReader(uri, options)
        assert standalone.topics() == [TOPIC]
    finally:
        endpoint.stop()
    with pytest.raises(RemoteStoreUnavailableError):
        remote.read(manifest, manifest.end_offset - 1, 100)
    with pytest.raises(RemoteStoreUnavailableError):
        remote.offset_for_timestamp(manifest, 0)
    with pytest.raises(RemoteStoreUnavailableError):
        standalone.topics()
    with pytest.raises(RemoteStoreUnavailableError):
        list(standalone.records(TOPIC, PARTITION))


def test_a_closed_port_raises_unavailable() -> None:
    options = S3Endpoint(free_ports(1)[0]).options  # never started
    segment = RemoteSegment("0" * 16, 0, 0, 10, 100, 1, 2, -1, 0, {})
    manifest = Manifest(TOPIC, PARTITION, TOPIC_ID).next_version(
        [segment], broker_id=1, leader_epoch=0, now_ms=0
    )
    remote = RemoteLogReader(ObjectStore.open("s3://nowhere", options), cache_bytes=1 << 20)
    with pytest.raises(RemoteStoreUnavailableError):
        remote.read(manifest, 3, 100)
    with pytest.raises(RemoteStoreUnavailableError):
        TopicStoreReader("s3://nowhere", options).topics()
