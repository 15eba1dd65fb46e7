"""Fixtures of the reconciler tests: real broker processes registered as a ``static``
cluster, and a tenant to own topics."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controlplane.core.actors import Actor
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics import services
from controlplane.topics.models import Topic
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster

OPERATOR = Actor.system("tests")


@pytest.fixture
def cluster_row(db: None, cluster: list[BrokerProcess]) -> Cluster:
    """The ``cluster`` fixture's three brokers as rows of a static cluster."""
    return register_static_cluster(cluster)


@pytest.fixture
def tenant(cluster_row: Cluster) -> Tenant:
    return make_tenant("acme", region=cluster_row.region)


@pytest.fixture
def new_topic(tenant: Tenant) -> Callable[..., Topic]:
    """``new_topic(name, partitions=3, **config)`` through the topic service (placed);
    one replica per partition unless ``replication_factor`` says otherwise."""

    def create(name: str, partitions: int = 3, **config: object) -> Topic:
        config.setdefault("replication_factor", 1)
        topic: Topic = services.create_topic(
            tenant, name=name, partitions=partitions, actor=OPERATOR, **config
        )
        return topic

    return create
