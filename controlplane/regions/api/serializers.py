from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.core.actors import Actor
from controlplane.regions.choices import ProvisionerKind
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.regions.services import MAX_BROKERS_PER_CLUSTER


class ControllerSerializer(serializers.Serializer[Region]):
    """The region's active controller (platform administrators only)."""

    id = serializers.CharField(source="controller_id")
    epoch = serializers.IntegerField(source="controller_epoch")
    seen_at = serializers.DateTimeField(source="controller_seen_at", allow_null=True)


class RegionSerializer(serializers.ModelSerializer[Region]):
    controller = serializers.SerializerMethodField()

    class Meta:
        model = Region
        fields = ["name", "display_name", "controller", "created_at", "updated_at"]
        read_only_fields = fields

    @extend_schema_field(ControllerSerializer(allow_null=True))
    def get_controller(self, region: Region) -> dict[str, Any] | None:
        """null for everyone but platform administrators."""
        request = self.context.get("request")
        user = getattr(request, "user", None)
        if not (isinstance(user, Actor) and user.platform_admin):
            return None
        return dict(ControllerSerializer(region).data)


class RegionCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=32, help_text="lowercase slug, e.g. eu-west")
    display_name = serializers.CharField(max_length=200, required=False, allow_blank=True)


class RegionUpdateSerializer(serializers.Serializer[Any]):
    display_name = serializers.CharField(max_length=200, allow_blank=True)


class BrokerSummarySerializer(serializers.ModelSerializer[Broker]):
    class Meta:
        model = Broker
        fields = ["id", "broker_id", "address", "kafka_address", "phase"]
        read_only_fields = fields


class ClusterSerializer(serializers.ModelSerializer[Cluster]):
    """A cluster. Its object store's options are a secret: never returned, only whether
    they are set (``remote_store_options_set``)."""

    region: serializers.SlugRelatedField[Region] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    brokers = BrokerSummarySerializer(many=True, read_only=True)
    remote_store_options_set = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = [
            "id",
            "region",
            "name",
            "provisioner",
            "broker_count",
            "remote_store_uri",
            "remote_store_options_set",
            "status",
            "status_reason",
            "brokers",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_remote_store_options_set(self, cluster: Cluster) -> bool:
        """Whether the object store has options (credentials); they are never shown."""
        return bool(cluster.remote_store_options)


class RemoteStoreSerializer(serializers.Serializer[Any]):
    """A cluster's object store, written only. Types only: the rules are the model's
    (``regions.remote_store``)."""

    remote_store_uri = serializers.CharField(
        max_length=1024,
        required=False,
        allow_blank=True,
        help_text="tiered storage's object store: an absolute folder path, file://, s3://, "
        "gs://, hdfs:// or memory:// URI; blank: tiering off",
    )
    remote_store_options = serializers.DictField(
        required=False,
        write_only=True,
        help_text="the store's fsspec options (endpoint, credentials): a secret, never "
        "returned (see remote_store_options_set)",
    )


class ClusterCreateSerializer(RemoteStoreSerializer):
    region = serializers.SlugRelatedField(slug_field="name", queryset=Region.objects.all())
    name = serializers.CharField(max_length=32)
    provisioner = serializers.ChoiceField(
        choices=ProvisionerKind.choices, default=ProvisionerKind.LOCAL
    )
    broker_count = serializers.IntegerField(min_value=1, max_value=MAX_BROKERS_PER_CLUSTER)


class ClusterUpdateSerializer(RemoteStoreSerializer):
    broker_count = serializers.IntegerField(
        min_value=1, max_value=MAX_BROKERS_PER_CLUSTER, required=False, help_text="may only grow"
    )


class BrokerSerializer(serializers.ModelSerializer[Broker]):
    cluster: serializers.PrimaryKeyRelatedField[Cluster] = serializers.PrimaryKeyRelatedField(
        read_only=True
    )
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    region = serializers.CharField(source="cluster.region.name", read_only=True)

    class Meta:
        model = Broker
        fields = [
            "id",
            "cluster",
            "cluster_name",
            "region",
            "broker_id",
            "host",
            "port",
            "address",
            "kafka_port",
            "kafka_address",
            "rack",
            "phase",
            "phase_reason",
            "last_heartbeat_at",
            "version",
            "pid",
            "data_dir",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class BrokerRegisterSerializer(serializers.Serializer[Any]):
    """A broker of a ``static`` cluster, by address (a known id gets a new address)."""

    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.all())
    broker_id = serializers.IntegerField(min_value=0, max_value=2**20 - 1)
    host = serializers.CharField(max_length=255)
    port = serializers.IntegerField(min_value=1, max_value=65535)
    kafka_port = serializers.IntegerField(
        min_value=1,
        max_value=65535,
        required=False,
        allow_null=True,
        default=None,
        help_text="its Kafka wire-protocol listener, on the same host as the gRPC port; "
        "omitted or null: none",
    )
    rack = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")
