"""Deleting a topic's objects from the store, and finding incarnations nobody owns.

``delete_incarnation`` removes one incarnation of a topic (``<topic>/<topic_id>/``): it
first writes the ``DELETED`` marker, so readers skip the folder from then on, deletes
every object under it, and removes the marker last. Killed half-way, it leaves the marker
and what it had not deleted yet; running it again finishes the job (it is idempotent),
and ``stray_incarnations`` finds such leftovers for whoever runs it.

``stray_incarnations(store, live)`` lists the incarnations in the store that ``live``
(the (topic, topic id) pairs the control plane holds) does not name: topics deleted
while the store was unreachable, or whose deletion was cut short. A store's root must
belong to one control plane: ``live`` is everything it holds.
"""

from __future__ import annotations

from collections.abc import Iterable

from dataplane.tiered import layout
from dataplane.tiered.store import ObjectStore


def delete_incarnation(store: ObjectStore, topic: str, topic_id: str) -> int:
    """Delete every object of ``topic``'s incarnation ``topic_id``; how many there were."""
    prefix = layout.topic_prefix(topic, topic_id)
    marker = f"{prefix}/{layout.DELETED_MARKER}"
    objects = [info.key for info in store.list(prefix) if info.key != marker]
    if not objects and not store.exists(marker):
        return 0
    store.put_bytes(marker, b"")
    store.delete(objects)
    store.delete([marker])
    return len(objects)


def incarnations(store: ObjectStore) -> list[tuple[str, str]]:
    """Every (topic, topic id) folder in the store, deleted ones included."""
    found = []
    for topic in store.children(""):
        for topic_id in store.children(topic):
            found.append((topic, "" if topic_id == layout.NO_TOPIC_ID else topic_id))
    return found


def stray_incarnations(
    store: ObjectStore, live: Iterable[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The incarnations in the store with a topic id that ``live`` does not name. Those
    without an id (written by a broker no control plane manages) are never stray."""
    owned = set(live)
    return [found for found in incarnations(store) if found[1] and found not in owned]
