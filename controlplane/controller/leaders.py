"""Partition leadership and the metadata the controller pushes to a cluster's brokers.

With replication factor 1 (replication comes in a later issue) a partition's leader is
the broker it is assigned to. ``PartitionAssignment.leader`` records the elected one and
``leader_epoch`` grows at every change of leader (the first election keeps 0), so the
replication work plugs its ISR-based election in here.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.quotas.services import tenant_quotas
from controlplane.regions.models import Broker, Cluster
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import PartitionAssignment
from dataplane._gen.meridian.v1 import admin_pb2, common_pb2

log = logging.getLogger(__name__)


@transaction.atomic
def elect_leaders(cluster: Cluster, *, actor: Actor) -> int:
    """Make every partition of ``cluster`` led by its assigned broker; returns how many
    leaders changed. A change of leader (not a first election) bumps the leader epoch
    and is audited."""
    rows = (
        PartitionAssignment.objects.select_for_update(of=("self",))
        .filter(topic__cluster=cluster)
        .filter(Q(leader__isnull=True) | ~Q(leader_id=F("broker_id")))
    )
    changed = 0
    for row in rows:
        changed += _elect(row, actor)
    return changed


def _elect(row: PartitionAssignment, actor: Actor) -> int:
    if row.leader_id == row.broker_id:
        return 0
    before = audit.snapshot(row)
    first = row.leader_id is None
    row.leader_id = row.broker_id
    row.leader_epoch = row.leader_epoch if first else row.leader_epoch + 1
    row.updated_at = timezone.now()
    row.save(update_fields=["leader", "leader_epoch", "updated_at"])
    if not first:
        audit.record(actor, "partition.leader", row, before=before, after=audit.snapshot(row))
        log.info("partition %s-%s: leader %s, epoch %s", row.topic_id, row.partition,
                 row.broker_id, row.leader_epoch)  # fmt: skip
    return 1


def metadata_request(
    cluster: Cluster, brokers: list[Broker], *, controller_id: str, epoch: int
) -> admin_pb2.UpdateMetadataRequest:
    """The push for ``cluster``: its addressed brokers, the leaders of every topic not
    being deleted, and its tenants' quotas."""
    region = cluster.region.name
    infos = [
        common_pb2.BrokerInfo(id=b.broker_id, host=b.host, port=b.port, region=region, rack=b.rack)
        for b in brokers
        if b.port
    ]
    rows = (
        PartitionAssignment.objects.filter(topic__cluster=cluster, leader__isnull=False)
        .exclude(topic__status=TopicStatus.DELETING)
        .order_by("topic__full_name", "partition")
        .values_list("topic__full_name", "partition", "leader__broker_id", "leader_epoch")
    )
    topics: dict[str, list[admin_pb2.MetadataPartition]] = {}
    for name, partition, leader, leader_epoch in rows:
        topics.setdefault(name, []).append(
            admin_pb2.MetadataPartition(
                partition=partition, leader_id=leader, leader_epoch=leader_epoch, replicas=[leader]
            )
        )
    return admin_pb2.UpdateMetadataRequest(
        controller_id=controller_id,
        controller_epoch=epoch,
        cluster_id=cluster.name,
        brokers=infos,
        topics=[admin_pb2.MetadataTopic(name=n, partitions=p) for n, p in topics.items()],
        quotas=tenant_quotas(cluster),
    )
