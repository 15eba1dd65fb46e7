from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from controlplane.core.models import StatusModel, TimestampedModel
from controlplane.core.validators import slug_validator
from controlplane.regions.choices import BrokerPhase, ProvisionerKind
from controlplane.regions.remote_store import (
    remote_store_options_validator,
    remote_store_uri_validator,
)


class Region(TimestampedModel):
    """A deployment region. One controller is active per region; ``controller_epoch``
    grows at every takeover and fences a deposed controller's pushes."""

    name = models.CharField(max_length=32, unique=True, validators=[slug_validator])
    display_name = models.CharField(max_length=200, blank=True, default="")
    controller_id = models.CharField(max_length=255, blank=True, default="")
    controller_epoch = models.BigIntegerField(default=0)
    controller_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Cluster(StatusModel):
    """A set of brokers in one region that hosts topics.

    ``remote_store_uri`` is the object store of tiered storage (an fsspec URI: an
    absolute folder path, ``file://``, ``s3://bucket/prefix`` ...; blank: tiering off);
    ``remote_store_options`` its filesystem options (endpoint, credentials): a secret,
    never returned by the API, shown in the console or audited (``remote_store.py``)."""

    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="clusters")
    name = models.CharField(max_length=32, validators=[slug_validator])
    provisioner = models.CharField(
        max_length=16, choices=ProvisionerKind.choices, default=ProvisionerKind.LOCAL
    )
    broker_count = models.PositiveIntegerField(default=3)
    remote_store_uri = models.CharField(
        max_length=1024, blank=True, default="", validators=[remote_store_uri_validator]
    )
    remote_store_options = models.JSONField(
        default=dict, blank=True, validators=[remote_store_options_validator]
    )

    class Meta:
        ordering = ["region", "name"]
        constraints = [
            models.UniqueConstraint(fields=["region", "name"], name="cluster_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.region.name}/{self.name}"


class Broker(TimestampedModel):
    """One broker process of a cluster: where it listens and whether it is alive
    (heartbeats are the controller's metadata pushes it answers). ``port`` is its gRPC
    listener; ``kafka_port`` its Kafka wire-protocol listener on the same host (null:
    none, or not known yet)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="brokers")
    broker_id = models.PositiveIntegerField()
    host = models.CharField(max_length=255, default="127.0.0.1")
    port = models.PositiveIntegerField(null=True, blank=True)
    kafka_port = models.PositiveIntegerField(null=True, blank=True)
    rack = models.CharField(max_length=64, blank=True, default="")
    phase = models.CharField(
        max_length=16, choices=BrokerPhase.choices, default=BrokerPhase.PENDING
    )
    phase_reason = models.TextField(blank=True, default="")
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    version = models.CharField(max_length=64, blank=True, default="")
    # Filled by a provisioner that runs the process itself.
    pid = models.IntegerField(null=True, blank=True)
    data_dir = models.CharField(max_length=1024, blank=True, default="")

    class Meta:
        ordering = ["cluster", "broker_id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "broker_id"], name="broker_unique_id")
        ]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}" if self.port else ""

    def clean(self) -> None:
        if self.kafka_port is not None and self.kafka_port == self.port:
            raise ValidationError(
                {"kafka_port": "must differ from port: Kafka's protocol has a listener of its own"}
            )

    @property
    def kafka_address(self) -> str:
        """Where Kafka clients reach the broker (host:kafka_port); "" without a Kafka
        listener."""
        return f"{self.host}:{self.kafka_port}" if self.kafka_port else ""

    def __str__(self) -> str:
        return f"{self.cluster}/broker-{self.broker_id}"
