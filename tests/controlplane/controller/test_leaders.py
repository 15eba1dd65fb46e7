"""The push's broker list (``metadata_request``, no broker processes): every addressed
broker with its gRPC port and its Kafka listener's port, 0 when it has none or it is not
known yet; a broker without an address is left out."""

from __future__ import annotations

import pytest

from controlplane.controller.leaders import metadata_request
from controlplane.regions.models import Cluster
from tests.controlplane.api_base import make_cluster


@pytest.fixture
def cluster(db: None) -> Cluster:
    return make_cluster("local", brokers=3)


def test_each_broker_info_carries_its_kafka_port_or_zero(cluster: Cluster) -> None:
    cluster.brokers.filter(broker_id=1).update(kafka_port=41001, rack="r1")
    cluster.brokers.filter(broker_id=3).update(port=None, kafka_port=41003)
    push = metadata_request(cluster, list(cluster.brokers.all()), controller_id="c", epoch=1)
    shown = {(b.id, b.host, b.port, b.kafka_port, b.region, b.rack) for b in push.brokers}
    assert shown == {
        (1, "127.0.0.1", 40001, 41001, "local", "r1"),
        (2, "127.0.0.1", 40002, 0, "local", ""),
    }
