"""Region jobs: thin wrappers over ``controlplane.regions.teardown``."""

from __future__ import annotations

from celery import shared_task

from controlplane.core.actors import Actor
from controlplane.regions import teardown
from controlplane.regions.provisioners import ProvisioningError


@shared_task(
    name="regions.delete_cluster",
    acks_late=True,
    autoretry_for=(ProvisioningError,),
    retry_backoff=True,
    max_retries=8,
)
def delete_cluster(cluster_id: int) -> None:
    """Stop the brokers of a cluster in ``deleting``, then remove it (idempotent)."""
    teardown.stop_and_remove_cluster(cluster_id, actor=Actor.system("regions"))


@shared_task(name="regions.reconcile_clusters")
def reconcile_clusters() -> int:
    """Periodic: enqueue again the deletions of clusters whose job was lost or failed."""
    stale = teardown.stale_deleting_clusters()
    for cluster_id in stale:
        delete_cluster.delay(cluster_id)
    return len(stale)
