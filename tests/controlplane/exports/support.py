"""Shared rows for the exports and indexes tests: a cluster tiering to a local store
and a tenant's tiered topic."""

from __future__ import annotations

from pathlib import Path

from controlplane.core.actors import Actor
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import make_cluster

SYSTEM = Actor.system("tests")


def tiered_cluster(store: Path) -> Cluster:
    """A ready cluster (broker rows only) whose object store is the folder ``store``."""
    cluster = make_cluster("local")
    cluster.remote_store_uri = str(store)
    cluster.remote_store_options = {"auto_mkdir": True}
    cluster.save()
    return cluster


def tiered_topic(tenant: Tenant, name: str = "orders", partitions: int = 2) -> Topic:
    topic: Topic = create_topic(
        tenant, name=name, partitions=partitions, remote_storage=True, actor=SYSTEM
    )
    return topic
