"""A tiered topic's objects in its cluster's object store, from the control plane's side.

The brokers upload and expire a topic's segments under its *incarnation*
(``<full name>/<topic id>/``, ``dataplane.tiered.layout``); they never delete a whole
incarnation, because only the control plane knows a topic is gone. So:

- ``delete_remote_objects(topic)`` runs when the reconciler deletes a topic, after its
  partitions are gone from every broker (no leader uploads any more) and before its
  row goes. A store that does not answer does not hold the deletion up: the topic goes,
  and its incarnation becomes a stray.
- ``clean_remote_store(cluster_id)`` (``topics.clean_remote_stores``, periodic) deletes
  the strays: incarnations in the store whose topic id no topic row has (a deletion the
  store missed, or one cut short). Ids are topic primary keys, unique over every
  cluster, so a store shared by clusters of this control plane is judged against all
  of its topics; a store's root must not be shared with another control plane.
"""

from __future__ import annotations

import logging

from controlplane.regions.models import Cluster
from controlplane.regions.remote_store import open_store
from controlplane.topics.models import Topic
from dataplane.tiered import deletion
from dataplane.tiered.store import RemoteStoreError

log = logging.getLogger(__name__)


def delete_remote_objects(topic: Topic) -> int:
    """Delete the topic's incarnation from its cluster's store; how many objects went.
    A store that fails is logged (the periodic cleaner finishes the job): 0."""
    cluster = topic.cluster
    if not topic.remote_storage or not cluster.remote_store_uri:
        return 0
    try:
        deleted = deletion.delete_incarnation(open_store(cluster), topic.full_name, str(topic.pk))
    except RemoteStoreError as exc:
        log.warning("topic %s: its objects stay in the store for now: %s", topic.full_name, exc)
        return 0
    log.info("topic %s: %d objects deleted from the store", topic.full_name, deleted)
    return deleted


def clean_remote_store(cluster_id: int) -> list[tuple[str, str]]:
    """Delete the stray incarnations of the cluster's store; the (topic, topic id) pairs
    deleted. Raises ``RemoteStoreError`` when the store does not answer."""
    cluster = Cluster.objects.filter(pk=cluster_id).exclude(remote_store_uri="").first()
    if cluster is None:
        return []
    store = open_store(cluster)
    strays = deletion.stray_incarnations(store, _live_incarnations())
    # Judged again against the rows read after the listing: a topic made meanwhile has
    # its row before any broker has its id, so it is never taken for a stray.
    live = _live_incarnations()
    strays = [stray for stray in strays if stray not in live]
    for topic, topic_id in strays:
        deleted = deletion.delete_incarnation(store, topic, topic_id)
        log.info("store of %s: stray %s/%s deleted (%d objects)", cluster, topic, topic_id,
                 deleted)  # fmt: skip
    return strays


def _live_incarnations() -> set[tuple[str, str]]:
    return {(name, str(pk)) for name, pk in Topic.objects.values_list("full_name", "pk")}
