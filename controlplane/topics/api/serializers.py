from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.topics.choices import AclOperation, Durability
from controlplane.topics.models import DriftFinding, PartitionAssignment, Topic, TopicAcl


class TopicConfigSerializer(serializers.Serializer[Any]):
    """The configuration fields, all optional. Types only: the bounds are checked by
    ``topics.validation`` (one place for each rule)."""

    retention_ms = serializers.IntegerField(required=False, help_text="how long records stay")
    retention_bytes = serializers.IntegerField(
        required=False, help_text="per partition: the oldest segments go beyond it"
    )
    max_message_bytes = serializers.IntegerField(required=False)
    durability = serializers.ChoiceField(choices=Durability.choices, required=False)
    min_insync_replicas = serializers.IntegerField(
        required=False, help_text="replicas in sync for an acks=all write; default min(2, RF)"
    )
    unclean_leader_election = serializers.BooleanField(
        required=False, help_text="elect an out-of-sync replica rather than stay offline"
    )
    remote_storage = serializers.BooleanField(
        required=False,
        help_text="tiered storage: sealed segments go to the cluster's object store (400 "
        "remote_storage_unavailable without one); cannot be turned off once on",
    )
    local_retention_ms = serializers.IntegerField(
        required=False,
        help_text="with remote_storage: how long records stay on the brokers' disks; "
        "-2 (default): retention_ms, -1: unlimited, else at most retention_ms",
    )
    local_retention_bytes = serializers.IntegerField(
        required=False,
        help_text="per partition, with remote_storage: what stays on the brokers' disks; "
        "-2 (default): retention_bytes, -1: unlimited, else at most retention_bytes",
    )
    max_segment_bytes = serializers.IntegerField(
        required=False,
        help_text="a partition's active segment is sealed (with remote_storage: uploaded) "
        "at this size; 1 MiB to 1 GiB, default 1 GiB",
    )
    segment_ms = serializers.IntegerField(
        required=False,
        help_text="... or at this age; 60000 (1 min) to 30 days, default 7 days",
    )


class AssignmentSerializer(serializers.ModelSerializer[PartitionAssignment]):
    """A partition's replicas (broker ids, the preferred leader first), its in-sync
    replicas, its leader (null: none elected yet, or offline) and, while a
    reassignment moves it, the replicas asked for (``target_replicas``) and then the
    brokers it is still to be deleted from (``removing_replicas``)."""

    broker_id = serializers.IntegerField(
        source="broker.broker_id", read_only=True, help_text="the preferred leader"
    )
    leader_id = serializers.SerializerMethodField()
    replicas = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    isr = serializers.ListField(child=serializers.IntegerField(), read_only=True)
    target_replicas = serializers.ListField(
        child=serializers.IntegerField(), read_only=True, allow_null=True
    )
    removing_replicas = serializers.ListField(
        child=serializers.IntegerField(),
        read_only=True,
        help_text="brokers the partition is still to be deleted from after a move",
    )

    class Meta:
        model = PartitionAssignment
        fields = [
            "partition",
            "broker_id",
            "replicas",
            "isr",
            "isr_version",
            "leader_id",
            "leader_epoch",
            "target_replicas",
            "removing_replicas",
            "status",
        ]
        read_only_fields = fields

    def get_leader_id(self, row: PartitionAssignment) -> int | None:
        return row.leader.broker_id if row.leader is not None else None


class TopicSummarySerializer(serializers.ModelSerializer[Topic]):
    """A topic in a list: everything but where its partitions are."""

    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    region = serializers.CharField(source="cluster.region.name", read_only=True)
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    mirror_of = serializers.CharField(
        source="mirror_of.cluster.region.name",
        read_only=True,
        allow_null=True,
        default=None,
        help_text="a mirror copy: the region of its origin topic (null: an origin)",
    )
    mirror_link = serializers.CharField(
        source="mirror_link.name",
        read_only=True,
        allow_null=True,
        default=None,
        help_text="the mirror link keeping the copy (null: none, or an origin)",
    )

    class Meta:
        model = Topic
        fields = [
            "full_name",
            "tenant",
            "name",
            "region",
            "cluster",
            "mirror_of",
            "mirror_link",
            "partitions",
            "retention_ms",
            "retention_bytes",
            "max_message_bytes",
            "durability",
            "replication_factor",
            "min_insync_replicas",
            "unclean_leader_election",
            "remote_storage",
            "local_retention_ms",
            "local_retention_bytes",
            "max_segment_bytes",
            "segment_ms",
            "status",
            "status_reason",
            "generation",
            "observed_generation",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class TopicSerializer(TopicSummarySerializer):
    """One topic with its partition assignments, and its size as its partitions'
    leaders last reported it to the reconciler: on their disks (``local_bytes``) and in
    the object store (``remote_bytes``, tiered storage)."""

    assignments = AssignmentSerializer(many=True, read_only=True)
    local_bytes = serializers.SerializerMethodField()
    remote_bytes = serializers.SerializerMethodField()

    class Meta(TopicSummarySerializer.Meta):
        fields = [*TopicSummarySerializer.Meta.fields, "local_bytes", "remote_bytes", "assignments"]
        read_only_fields = fields

    def get_local_bytes(self, topic: Topic) -> int:
        """Sum over partitions of the leader's bytes on disk, as last observed."""
        return sum(a.size_bytes for a in topic.assignments.all())

    def get_remote_bytes(self, topic: Topic) -> int:
        """Sum over partitions of the bytes in the object store, as last observed."""
        return sum(a.remote_bytes for a in topic.assignments.all())


class TopicCreateSerializer(TopicConfigSerializer):
    tenant = serializers.CharField(
        required=False, help_text="tenant slug; optional when the caller has one tenant"
    )
    name = serializers.CharField(max_length=200, help_text="the part after '<tenant>.'")
    partitions = serializers.IntegerField()
    region = serializers.CharField(
        required=False, help_text="region name; default: the tenant's home region"
    )
    replication_factor = serializers.IntegerField(
        required=False, help_text="brokers per partition; default: 3, or the cluster's brokers"
    )


class TopicUpdateSerializer(TopicConfigSerializer):
    partitions = serializers.IntegerField(required=False, help_text="may only grow")
    replication_factor = serializers.IntegerField(
        required=False, help_text="cannot change after creation (409)"
    )


class PartitionTargetSerializer(serializers.Serializer[Any]):
    partition = serializers.IntegerField(min_value=0)
    replicas = serializers.ListField(
        child=serializers.IntegerField(min_value=0),
        min_length=1,
        help_text="broker ids, the preferred leader first",
    )


class ReassignSerializer(serializers.Serializer[Any]):
    """The replicas each listed partition moves to (others stay where they are)."""

    partitions = PartitionTargetSerializer(many=True, allow_empty=False)


class DriftFindingSerializer(serializers.ModelSerializer[DriftFinding]):
    broker_id = serializers.IntegerField(source="broker.broker_id", read_only=True)
    cluster = serializers.CharField(source="broker.cluster.name", read_only=True)
    region = serializers.CharField(source="broker.cluster.region.name", read_only=True)

    class Meta:
        model = DriftFinding
        fields = [
            "id",
            "region",
            "cluster",
            "broker_id",
            "topic_name",
            "partition",
            "kind",
            "detail",
            "healed",
            "last_seen_at",
            "resolved_at",
            "created_at",
        ]
        read_only_fields = fields


class TopicAclSerializer(serializers.ModelSerializer[TopicAcl]):
    """Who (``principal``: a service account's client id or a user's subject) may do
    what (``operations``) on a topic; once a topic has entries, its non-admin callers
    may do only what an entry naming them lists."""

    tenant = serializers.CharField(source="topic.tenant.slug", read_only=True)
    topic = serializers.CharField(source="topic.full_name", read_only=True)
    region = serializers.CharField(source="topic.cluster.region.name", read_only=True)
    operations = serializers.ListField(
        child=serializers.ChoiceField(choices=AclOperation.choices), read_only=True
    )

    class Meta:
        model = TopicAcl
        fields = [
            "id",
            "tenant",
            "topic",
            "region",
            "principal",
            "operations",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class TopicAclCreateSerializer(serializers.Serializer[Any]):
    """Types only: the rules (a non-empty list, a principal of the topic's tenant) are
    the model's and ``topics.acls``'s."""

    tenant = serializers.CharField(
        max_length=32, required=False, help_text="tenant slug; default: the topic's"
    )
    topic = serializers.CharField(max_length=240, help_text="full topic name")
    region = serializers.CharField(
        max_length=32,
        required=False,
        help_text="the region of the topic of that name (a mirror copy); default: the origin",
    )
    principal = serializers.CharField(
        max_length=255, help_text="a service account's client id (<tenant>--<name>) or a subject"
    )
    operations = serializers.ListField(
        child=serializers.ChoiceField(choices=AclOperation.choices),
        help_text="what the principal may do (non-empty)",
    )


class TopicAclUpdateSerializer(serializers.Serializer[Any]):
    operations = serializers.ListField(
        child=serializers.ChoiceField(choices=AclOperation.choices),
        required=False,
        help_text="replaces the entry's operations (non-empty)",
    )
