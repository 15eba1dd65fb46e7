"""The end of a cluster's life, carried out by the ``regions.delete_cluster`` job after
``services.delete_cluster`` marked it ``deleting``: its brokers are stopped by its
provisioner, then its rows go. A job lost or failed is found again
(``stale_deleting_clusters``) and enqueued by ``regions.reconcile_clusters``."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.regions.models import Cluster
from controlplane.regions.provisioners import get_provisioner


def stop_and_remove_cluster(cluster_id: int, *, actor: Actor) -> None:
    """Stop the brokers of a cluster in ``deleting``, then remove it (idempotent).
    Raises ``ProvisioningError`` when a broker would not stop (the job retries)."""
    cluster = Cluster.objects.filter(pk=cluster_id, status=ProvisioningStatus.DELETING).first()
    if cluster is None:
        return
    provisioner = get_provisioner(cluster)
    for broker in cluster.brokers.all():
        provisioner.stop_broker(broker)
    remove_cluster(cluster_id, actor=actor)


@transaction.atomic
def remove_cluster(cluster_id: int, *, actor: Actor) -> None:
    """Remove a cluster in ``deleting`` and its brokers (their processes already
    stopped). Idempotent."""
    cluster = Cluster.objects.select_for_update().filter(pk=cluster_id).first()
    if cluster is None or cluster.status != ProvisioningStatus.DELETING:
        return
    audit.record(actor, "cluster.remove", cluster, before=audit.snapshot(cluster))
    cluster.delete()


def stale_deleting_clusters() -> list[int]:
    """Clusters marked deleting longer than a reconcile interval ago: their job was lost
    or failed."""
    cutoff = timezone.now() - timedelta(seconds=settings.RECONCILE_INTERVAL_S)
    stale = Cluster.objects.filter(status=ProvisioningStatus.DELETING, updated_at__lt=cutoff)
    return list(stale.values_list("pk", flat=True))
