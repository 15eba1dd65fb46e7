"""Deleting a topic's incarnation from a local-folder store, and finding stray ones."""

from __future__ import annotations

from pathlib import Path

from dataplane.tiered import layout, manifests
from dataplane.tiered.deletion import delete_incarnation, incarnations, stray_incarnations
from dataplane.tiered.store import ObjectStore


def _fill(store: ObjectStore, topic: str, topic_id: str, partitions: int = 2) -> int:
    keys = 0
    for partition in range(partitions):
        for kind in layout.FILE_KINDS:
            store.put_bytes(layout.segment_key(topic, topic_id, partition, 0, "ab" * 8, kind), b"x")
            keys += 1
        manifest = layout.Manifest(topic=topic, partition=partition, topic_id=topic_id)
        assert manifests.commit(
            store, manifest.next_version([], broker_id=1, leader_epoch=0, now_ms=1)
        )
        keys += 1
    return keys


def test_deleting_an_incarnation_removes_every_object_and_leaves_the_others(
    tmp_path: Path,
) -> None:
    store = ObjectStore.open(str(tmp_path))
    doomed = _fill(store, "acme.orders", "1")
    _fill(store, "acme.orders", "2")  # the topic made again under the same name
    assert delete_incarnation(store, "acme.orders", "1") == doomed
    assert store.list("acme.orders/1") == []
    assert manifests.incarnations(store, "acme.orders") == ["2"]
    assert delete_incarnation(store, "acme.orders", "1") == 0  # again: nothing to do


def test_a_deletion_cut_short_is_skipped_by_readers_and_finished_by_a_rerun(
    tmp_path: Path,
) -> None:
    store = ObjectStore.open(str(tmp_path))
    _fill(store, "acme.orders", "1")
    store.put_bytes(f"acme.orders/1/{layout.DELETED_MARKER}", b"")  # killed after the marker
    assert manifests.live_incarnation(store, "acme.orders") is None
    assert delete_incarnation(store, "acme.orders", "1") > 0
    assert store.list("acme.orders") == []


def test_stray_incarnations_are_those_the_control_plane_does_not_hold(tmp_path: Path) -> None:
    store = ObjectStore.open(str(tmp_path))
    _fill(store, "acme.orders", "1")
    _fill(store, "acme.orders", "2")
    _fill(store, "acme.audit", "3")
    _fill(store, "acme.raw", "")  # uploaded by a broker without a topic id
    assert sorted(incarnations(store)) == [
        ("acme.audit", "3"),
        ("acme.orders", "1"),
        ("acme.orders", "2"),
        ("acme.raw", ""),
    ]
    live = [("acme.orders", "2"), ("acme.audit", "3")]
    assert stray_incarnations(store, live) == [("acme.orders", "1")]
