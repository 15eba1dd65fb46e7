"""The metadata the controller pushes to a cluster's brokers (``metadata_request``).

Leadership itself is decided in ``controlplane.topics.election`` and written by
``controlplane.topics.partitions``.
"""

from __future__ import annotations

from controlplane.quotas.services import tenant_quotas
from controlplane.regions.models import Broker, Cluster
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import PartitionAssignment, TopicAcl
from dataplane._gen.meridian.v1 import admin_pb2, common_pb2

NO_LEADER = -1  # MetadataPartition.leader_id of a partition without a leader


def metadata_request(
    cluster: Cluster, brokers: list[Broker], *, controller_id: str, epoch: int
) -> admin_pb2.UpdateMetadataRequest:
    """The push for ``cluster``: its addressed brokers (with their Kafka listener's port,
    0 when they have none or it is not known yet) and, for every topic not being
    deleted, its partitions' leaders (``NO_LEADER`` when none), replicas and ISR, and
    the topic's ``min_insync_replicas``, unclean election flag and ACL entries (by
    principal); and its tenants' quotas."""
    region = cluster.region.name
    infos = [
        common_pb2.BrokerInfo(
            id=b.broker_id,
            host=b.host,
            port=b.port,
            region=region,
            rack=b.rack,
            kafka_port=b.kafka_port or 0,
        )
        for b in brokers
        if b.port
    ]
    rows = (
        PartitionAssignment.objects.filter(topic__cluster=cluster)
        .exclude(topic__status=TopicStatus.DELETING)
        .select_related("topic", "leader")
        .order_by("topic__full_name", "partition")
    )
    acls = topic_acls(cluster)
    topics: dict[str, admin_pb2.MetadataTopic] = {}
    for row in rows:
        topic = row.topic
        entry = topics.get(topic.full_name)
        if entry is None:
            entry = topics[topic.full_name] = admin_pb2.MetadataTopic(
                name=topic.full_name,
                min_insync_replicas=topic.min_insync_replicas,
                unclean_leader_election=topic.unclean_leader_election,
                # A lane topic's ACLs are its trunk's (which is on the same cluster).
                acls=acls.get(topic.trunk_id or topic.pk, []),
            )
        entry.partitions.append(
            admin_pb2.MetadataPartition(
                partition=row.partition,
                leader_id=row.leader.broker_id if row.leader is not None else NO_LEADER,
                leader_epoch=row.leader_epoch,
                replicas=row.replicas,
                isr=row.isr,
                isr_version=row.isr_version,
            )
        )
    return admin_pb2.UpdateMetadataRequest(
        controller_id=controller_id,
        controller_epoch=epoch,
        cluster_id=cluster.name,
        brokers=infos,
        topics=list(topics.values()),
        quotas=tenant_quotas(cluster),
    )


def topic_acls(cluster: Cluster) -> dict[int, list[admin_pb2.AclEntry]]:
    """The ACL entries of the cluster's topics by topic pk, each topic's ordered by
    principal (an unchanged push encodes the same bytes)."""
    entries: dict[int, list[admin_pb2.AclEntry]] = {}
    rows = (
        TopicAcl.objects.filter(topic__cluster=cluster)
        .order_by("topic_id", "principal")
        .values_list("topic_id", "principal", "operations")
    )
    for topic_id, principal, operations in rows:
        entries.setdefault(topic_id, []).append(
            admin_pb2.AclEntry(principal=principal, operations=operations)
        )
    return entries
