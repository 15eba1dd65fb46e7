"""The end of a cluster's life, after ``services.delete_cluster`` marked it ``deleting``:
its brokers are stopped by its provisioner, then its rows go. The
``regions.delete_cluster`` job does it (``stop_and_remove_cluster``); a job lost or
failed is found again (``stale_deleting_clusters``) and enqueued by
``regions.reconcile_clusters``. A provisioner ``stopped_by_controller`` (Kubernetes,
whose API only the region's controller reaches) is left to the region's controller,
which takes a step on each tick (``tear_down_step``) until every broker is stopped."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Cluster
from controlplane.regions.provisioners import Provisioner, get_provisioner


def stop_and_remove_cluster(cluster_id: int, *, actor: Actor) -> None:
    """Stop the brokers of a cluster in ``deleting``, then remove it (idempotent);
    nothing for a provisioner ``stopped_by_controller`` (the region's controller does
    it). Raises ``ProvisioningError`` when a broker would not stop (the job retries)."""
    cluster = Cluster.objects.filter(pk=cluster_id, status=ProvisioningStatus.DELETING).first()
    if cluster is None:
        return
    provisioner = get_provisioner(cluster)
    if provisioner.stopped_by_controller:
        return
    for broker in cluster.brokers.all():
        provisioner.stop_broker(broker)
    remove_cluster(cluster_id, actor=actor)


def tear_down_step(cluster: Cluster, provisioner: Provisioner, *, actor: Actor) -> bool:
    """One step of deleting a cluster in ``deleting`` whose provisioner is
    ``stopped_by_controller``, taken by its region's controller: each broker not
    stopped yet is asked to stop (which may finish on a later step), and once all are
    stopped the cluster is removed. Returns whether it is gone. Raises
    ``ProvisioningError`` or ``ClusterProvisioningError`` (the next step tries again)."""
    for broker in cluster.brokers.exclude(phase=BrokerPhase.STOPPED).order_by("-broker_id"):
        provisioner.stop_broker(broker)
    if cluster.brokers.exclude(phase=BrokerPhase.STOPPED).exists():
        return False
    remove_cluster(cluster.pk, actor=actor)
    return True


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
    """Clusters marked deleting longer than a reconcile interval ago whose job was lost
    or failed (not those their region's controller deletes)."""
    cutoff = timezone.now() - timedelta(seconds=settings.RECONCILE_INTERVAL_S)
    stale = Cluster.objects.filter(status=ProvisioningStatus.DELETING, updated_at__lt=cutoff)
    return [c.pk for c in stale.order_by("pk") if not get_provisioner(c).stopped_by_controller]
