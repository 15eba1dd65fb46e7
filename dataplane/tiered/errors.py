"""Typed failures of reading remote segments, one class per failure mode.

Each names the partition, the object's key and the offset being read, so the broker's
error table (``REMOTE_SEGMENT_MISSING``, ``REMOTE_SEGMENT_CORRUPT``) and an operator
reading a log line can say exactly which object failed. The store's own
``RemoteStoreUnavailableError`` (``store.py``) is the third way a read fails: the store
did not answer, and a retry may succeed; these two are not retriable.
"""

from __future__ import annotations


class RemoteSegmentError(Exception):
    """Base of the failures of a remote segment's objects."""

    def __init__(self, reason: str, *, topic: str, partition: int, key: str, offset: int) -> None:
        super().__init__(f"{topic}-{partition}: {key} (reading offset {offset}): {reason}")
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.key = key
        self.offset = offset


class RemoteSegmentMissingError(RemoteSegmentError):
    """An object the manifest lists is not in the store."""


class RemoteSegmentCorruptError(RemoteSegmentError):
    """An object's bytes disagree with the manifest, its index or the batch format: a
    bad CRC, a size or a structure that is not the one written, or batches whose offsets
    are not where the index and the manifest say they are."""
