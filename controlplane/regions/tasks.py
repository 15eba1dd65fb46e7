"""Region jobs: thin wrappers that reload by id and call a service or a provisioner."""

from __future__ import annotations

from celery import shared_task

from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.provisioning import get_provisioner
from controlplane.regions import services
from controlplane.regions.models import Cluster


@shared_task(name="regions.delete_cluster", acks_late=True)
def delete_cluster(cluster_id: int) -> None:
    """Stop the brokers of a cluster in ``deleting``, then remove it (idempotent)."""
    cluster = Cluster.objects.filter(pk=cluster_id, status=ProvisioningStatus.DELETING).first()
    if cluster is None:
        return
    provisioner = get_provisioner(cluster)
    for broker in cluster.brokers.all():
        provisioner.stop_broker(broker)
    services.remove_cluster(cluster_id, actor=Actor.system("regions"))
