"""Reading and committing remote manifests (format: ``layout.py``).

``latest`` lists a partition's ``manifest/`` folder and parses its highest version;
``commit`` creates the next version's key, which fails for every writer but one
(``ObjectStore.create``), so two leaders that both believe they lead never both commit
on top of the same version. ``live_incarnation`` finds the folder of a topic's current
incarnation from the store alone (for readers that know only its name).

Old versions are kept a while (``KEEP_VERSIONS``) so a reader that listed the folder
just before a commit still finds the version it chose; ``prune`` removes the rest.
"""

from __future__ import annotations

from dataplane.tiered import layout
from dataplane.tiered.layout import Manifest, ManifestError
from dataplane.tiered.store import ObjectInfo, ObjectStore, RemoteObjectMissingError

KEEP_VERSIONS = 4


def versions(store: ObjectStore, topic: str, topic_id: str, partition: int) -> list[int]:
    """The committed versions, ascending."""
    prefix = f"{layout.partition_prefix(topic, topic_id, partition)}/manifest"
    found = (layout.manifest_version(info.key) for info in store.list(prefix))
    return sorted(v for v in found if v is not None)


def latest(store: ObjectStore, topic: str, topic_id: str, partition: int) -> Manifest:
    """The latest committed manifest (an empty version 0 when none is); raises
    ``ManifestError`` for a damaged one and the store's errors."""
    for _ in range(3):
        committed = versions(store, topic, topic_id, partition)
        if not committed:
            return Manifest(topic=topic, partition=partition, topic_id=topic_id)
        key = layout.manifest_key(topic, topic_id, partition, committed[-1])
        try:
            manifest = Manifest.from_bytes(store.get(key))
        except RemoteObjectMissingError:
            continue  # pruned between the listing and the read: list again
        if (manifest.topic, manifest.partition, manifest.version) != (
            topic,
            partition,
            committed[-1],
        ):
            raise ManifestError(f"{key} names another partition or version")
        return manifest
    raise ManifestError(f"{topic}-{partition}: the manifest kept changing while read")


def commit(store: ObjectStore, manifest: Manifest) -> bool:
    """Create ``manifest``'s version; False if another writer committed it first."""
    return store.create(manifest.key, manifest.to_bytes())


def prune(store: ObjectStore, manifest: Manifest, *, leftovers_before_s: float = 0.0) -> int:
    """Remove versions older than the last ``KEEP_VERSIONS``, and the folder's objects
    that are no version (a local store's temporary files of a killed writer) written
    before ``leftovers_before_s`` (seconds since the epoch); how many went."""
    prefix = (
        f"{layout.partition_prefix(manifest.topic, manifest.topic_id, manifest.partition)}/manifest"
    )
    found = store.list(prefix)
    keys = [
        info.key
        for info in found
        if (version := layout.manifest_version(info.key)) is not None
        and version <= manifest.version - KEEP_VERSIONS
    ]
    keys += [
        info.key
        for info in found
        if layout.manifest_version(info.key) is None and 0 < info.modified_s < leftovers_before_s
    ]
    store.delete(keys)
    return len(keys)


def incarnations(store: ObjectStore, topic: str) -> list[str]:
    """The topic ids under ``topic``'s folder that are not being deleted."""
    live = []
    for topic_id in store.children(topic):
        if not store.exists(f"{layout.topic_prefix(topic, topic_id)}/{layout.DELETED_MARKER}"):
            live.append(topic_id)
    return live


def live_incarnation(store: ObjectStore, topic: str) -> str | None:
    """The topic id of ``topic``'s current incarnation in the store: the one not being
    deleted (of several, which only a deletion the store missed can leave, the one whose
    manifest was written last); None when the store holds none."""
    best: tuple[int, str] | None = None
    for topic_id in incarnations(store, topic):
        written = _last_written(store, topic, topic_id)
        if best is None or written > best[0]:
            best = (written, topic_id)
    return None if best is None else (best[1] if best[1] != layout.NO_TOPIC_ID else "")


def partitions(store: ObjectStore, topic: str, topic_id: str) -> list[int]:
    names = store.children(layout.topic_prefix(topic, topic_id))
    return sorted(int(name) for name in names if name.isdigit())


def _last_written(store: ObjectStore, topic: str, topic_id: str) -> int:
    newest = 0
    for partition in partitions(store, topic, topic_id):
        try:
            newest = max(newest, latest(store, topic, topic_id, partition).written_at_ms)
        except ManifestError:
            continue
    return newest


def segment_objects(
    store: ObjectStore, topic: str, topic_id: str, partition: int
) -> list[ObjectInfo]:
    """Every object under the partition's ``segments/`` folder, listed or not."""
    return store.list(f"{layout.partition_prefix(topic, topic_id, partition)}/segments")
