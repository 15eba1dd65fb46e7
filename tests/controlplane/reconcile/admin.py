"""Talk to a broker's Admin service directly, behind the control plane's back."""

from __future__ import annotations

from typing import Any

from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from tests.support.brokers import BrokerProcess


def hosted(broker: BrokerProcess, topic: str | None = None) -> dict[tuple[str, int], object]:
    """(topic, partition) -> ``PartitionState`` of what ``broker`` hosts."""
    with broker.channel() as channel:
        state = admin_pb2_grpc.AdminStub(channel).DescribeState(
            admin_pb2.DescribeStateRequest(topics=[topic] if topic else []), timeout=10
        )
    return {(p.topic, p.partition): p for p in state.partitions}


def delete(broker: BrokerProcess, topic: str, partition: int) -> None:
    with broker.channel() as channel:
        response = admin_pb2_grpc.AdminStub(channel).DeletePartitions(
            admin_pb2.DeletePartitionsRequest(
                partitions=[common_pb2.TopicPartition(topic=topic, partition=partition)]
            ),
            timeout=10,
        )
    assert [r.error for r in response.results] == [0]


def create(broker: BrokerProcess, topic: str, partition: int, **config: Any) -> None:
    spec = admin_pb2.PartitionSpec(
        topic=topic, partition=partition, config=common_pb2.PartitionConfig(**config)
    )
    with broker.channel() as channel:
        response = admin_pb2_grpc.AdminStub(channel).CreatePartitions(
            admin_pb2.CreatePartitionsRequest(partitions=[spec]), timeout=10
        )
    assert [r.error for r in response.results] == [0]


def alter(broker: BrokerProcess, topic: str, partition: int, **config: Any) -> None:
    spec = admin_pb2.PartitionSpec(
        topic=topic, partition=partition, config=common_pb2.PartitionConfig(**config)
    )
    with broker.channel() as channel:
        response = admin_pb2_grpc.AdminStub(channel).AlterPartitionConfigs(
            admin_pb2.AlterPartitionConfigsRequest(partitions=[spec]), timeout=10
        )
    assert [r.error for r in response.results] == [0]
