"""Uploading one sealed segment, and what may be uploaded next.

``upload_segment`` copies a sealed ``LogSegment``'s three files (``.log``, ``.index``,
``.timeindex``, streamed under a pin, so retention deleting the segment meanwhile cannot
cut a copy short) and its two side files (``.epochs``, ``.producers``, built by the
caller) to fresh keys (a new segment id: see ``layout.py``), and returns the manifest
entry describing them. Nothing lists the objects yet: the caller commits a manifest
version naming them (``manifests.commit``); until then they are invisible, and if the
caller dies they are orphans the cleaner removes.

``next_to_upload`` picks the sealed segments a leader may upload after ``manifest``:
whole, non-empty, wholly below the high watermark (committed records only, which no
truncation can take back), and ending past what the manifest already covers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import BinaryIO

import crc32c

from dataplane.storage.segment import LogSegment
from dataplane.tiered import layout
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.store import ObjectStore


class SegmentGoneError(Exception):
    """The segment was deleted or truncated before it could be read whole."""


def next_to_upload(
    manifest: Manifest, segments: Sequence[LogSegment], high_watermark: int
) -> list[LogSegment]:
    """The sealed segments to upload after ``manifest``, in offset order."""
    found = []
    for segment in segments[:-1]:  # the last one is active
        if not segment.sealed or segment.is_empty:
            continue
        if segment.next_offset > high_watermark:
            break
        if segment.next_offset > manifest.end_offset:
            found.append(segment)
    return found


def epochs_json(entries: Iterable[tuple[int, int]], start: int, end: int) -> bytes:
    """The leader-epoch entries that cover ``[start, end)``: the last one starting at or
    before ``start`` and every one starting inside."""
    ordered = sorted(entries)
    kept = [e for e in ordered if start < e[1] < end]
    before = [e for e in ordered if e[1] <= start]
    if before:
        kept.insert(0, before[-1])
    return json.dumps({"entries": [list(e) for e in kept]}).encode()


def upload_segment(
    store: ObjectStore,
    topic: str,
    topic_id: str,
    partition: int,
    segment: LogSegment,
    *,
    start_offset: int,
    sidecars: dict[str, bytes],
    now_ms: int,
) -> RemoteSegment:
    """Upload ``segment`` (see the module docstring); ``start_offset`` is the first offset
    it will serve. Raises ``SegmentGoneError`` and the store's errors."""
    segment_id = layout.new_segment_id()
    files: dict[str, tuple[int, int]] = {}
    try:
        with segment.pin():
            end, size = segment.next_offset, segment.size_bytes
            first_timestamp, leader_epoch = _first_and_epoch(segment, end, size)
            max_timestamp = segment.max_timestamp
            sources = {
                "log": (segment.log_path, size),
                "index": (segment.offset_index.path, None),
                "timeindex": (segment.time_index.path, None),
            }
            opened: dict[str, BinaryIO] = {
                kind: open(path, "rb")  # noqa: SIM115 - closed below, after the pin ends
                for kind, (path, _) in sources.items()
            }
    except FileNotFoundError as exc:
        raise SegmentGoneError(str(exc)) from exc
    try:
        for kind, handle in opened.items():
            length = sources[kind][1]
            if length is None:
                length = _size(handle)
            key = layout.segment_key(
                topic, topic_id, partition, segment.base_offset, segment_id, kind
            )
            files[kind] = store.put_stream(key, handle, length)
    finally:
        for handle in opened.values():
            handle.close()
    for kind in ("epochs", "producers"):
        key = layout.segment_key(topic, topic_id, partition, segment.base_offset, segment_id, kind)
        data = sidecars.get(kind, b"{}")
        store.put_bytes(key, data)
        files[kind] = (len(data), crc32c.crc32c(data))
    return RemoteSegment(
        id=segment_id,
        base_offset=segment.base_offset,
        start_offset=start_offset,
        end_offset=end,
        size_bytes=size,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        leader_epoch=leader_epoch,
        uploaded_at_ms=now_ms,
        files=files,
    )


def _first_and_epoch(segment: LogSegment, end: int, size: int) -> tuple[int, int]:
    """The first batch's max timestamp and the newest leader epoch (call under a pin)."""
    first, epoch = -1, -1
    for header in segment.batch_headers(segment.base_offset, size):
        if first < 0:
            first = header.max_timestamp
        epoch = max(epoch, header.partition_leader_epoch)
        if header.next_offset >= end:
            break
    return first, epoch


def _size(handle: BinaryIO) -> int:
    return os.fstat(handle.fileno()).st_size
