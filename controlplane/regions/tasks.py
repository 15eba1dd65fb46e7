"""Region jobs: thin wrappers that reload by id and call a service or a provisioner."""

from __future__ import annotations

from celery import shared_task

from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.provisioning import ProvisioningError, get_provisioner
from controlplane.regions import services
from controlplane.regions.models import Cluster


@shared_task(
    name="regions.delete_cluster",
    acks_late=True,
    autoretry_for=(ProvisioningError,),
    retry_backoff=True,
    max_retries=8,
)
def delete_cluster(cluster_id: int) -> None:
    """Stop the brokers of a cluster in ``deleting``, then remove it (idempotent)."""
    cluster = Cluster.objects.filter(pk=cluster_id, status=ProvisioningStatus.DELETING).first()
    if cluster is None:
        return
    provisioner = get_provisioner(cluster)
    for broker in cluster.brokers.all():
        provisioner.stop_broker(broker)
    services.remove_cluster(cluster_id, actor=Actor.system("regions"))


@shared_task(name="regions.reconcile_clusters")
def reconcile_clusters() -> int:
    """Periodic: enqueue again the deletions of clusters whose job was lost or failed."""
    stale = services.stale_deleting_clusters()
    for cluster_id in stale:
        delete_cluster.delay(cluster_id)
    return len(stale)
