"""The quotas the controller pushes: each tenant of the cluster with its rates, and the
storage flag from what the brokers reported, over every cluster the tenant uses; and,
through a controller tick, a real broker refusing a tenant over its storage quota."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.controller.controller import Controller
from controlplane.controller.leaders import metadata_request
from controlplane.controller.lease import FileLease
from controlplane.controller.push import MetadataPusher
from controlplane.core.actors import Actor
from controlplane.quotas.models import Quota
from controlplane.regions import services as regions
from controlplane.regions.models import Cluster
from controlplane.regions.provisioners import get_provisioner
from controlplane.topics.models import PartitionAssignment
from controlplane.topics.services import create_topic
from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from tests.controlplane.api_base import make_cluster, make_tenant
from tests.controlplane.controller.conftest import ADMIN, add_topic, create_partitions
from tests.support.brokers import BrokerProcess, stop_all

SYSTEM = Actor.system("tests")


def pushed_quotas(cluster: Any) -> dict[str, Any]:
    request = metadata_request(cluster, list(cluster.brokers.all()), controller_id="ctl", epoch=1)
    return {quota.tenant: quota for quota in request.quotas}


def test_the_push_carries_each_tenants_rates_and_its_storage_flag(db: None) -> None:
    local = make_cluster("local", "c1")
    make_cluster("far", "c2")
    acme, globex = make_tenant("acme"), make_tenant("globex")
    make_tenant("initech")  # no topic on the cluster: nothing to enforce there
    near = create_topic(acme, name="t", partitions=2, region="local", actor=SYSTEM)
    away = create_topic(acme, name="u", partitions=1, region="far", actor=SYSTEM)
    create_topic(globex, name="t", partitions=1, region="local", actor=SYSTEM)
    Quota.objects.filter(tenant=acme).update(
        produce_bytes_per_s=1000, fetch_bytes_per_s=2000, requests_per_s=30, max_storage_bytes=5000
    )
    PartitionAssignment.objects.filter(topic=near).update(size_bytes=2000)
    PartitionAssignment.objects.filter(topic=away).update(size_bytes=2001)

    quotas = pushed_quotas(local)

    assert sorted(quotas) == ["acme", "globex"]
    acme_quota = quotas["acme"]
    assert (
        acme_quota.produce_bytes_per_s,
        acme_quota.fetch_bytes_per_s,
        acme_quota.requests_per_s,
    ) == (1000, 2000, 30)
    assert acme_quota.storage_exceeded  # 2 * 2000 here + 2001 in the other region > 5000
    assert "6001" in acme_quota.storage_message
    assert "5000" in acme_quota.storage_message
    assert "max_storage_bytes" in acme_quota.storage_message
    globex_quota = quotas["globex"]
    assert not globex_quota.storage_exceeded
    assert globex_quota.storage_message == ""
    assert globex_quota.produce_bytes_per_s == Quota.objects.get(tenant=globex).produce_bytes_per_s


def test_the_storage_flag_clears_once_usage_is_back_within_the_quota(db: None) -> None:
    local = make_cluster("local", "c1")
    acme = make_tenant("acme")
    topic = create_topic(acme, name="t", partitions=1, region="local", actor=SYSTEM)
    Quota.objects.filter(tenant=acme).update(max_storage_bytes=1000)
    PartitionAssignment.objects.filter(topic=topic).update(size_bytes=1001)
    assert pushed_quotas(local)["acme"].storage_exceeded
    PartitionAssignment.objects.filter(topic=topic).update(size_bytes=1000)  # at the limit
    assert not pushed_quotas(local)["acme"].storage_exceeded


def test_the_quotas_of_a_push_are_in_a_stable_order(db: None) -> None:
    """An unchanged push encodes the same bytes, so brokers skip rewriting it."""
    local = make_cluster("local", "c1")
    for slug in ("zeta", "acme", "mid"):
        create_topic(make_tenant(slug), name="t", partitions=1, region="local", actor=SYSTEM)
    first = metadata_request(local, [], controller_id="ctl", epoch=1)
    again = metadata_request(local, [], controller_id="ctl", epoch=1)
    assert [q.tenant for q in first.quotas] == ["acme", "mid", "zeta"]
    assert first.SerializeToString(deterministic=True) == again.SerializeToString(
        deterministic=True
    )


# -- through the controller, to a real broker ------------------------------------------
@pytest.fixture
def far_broker(db: None, tmp_path: Path) -> Iterator[tuple[Cluster, BrokerProcess]]:
    """A ``static`` cluster ``far`` of one broker process, registered by address."""
    region = regions.create_region(name="quota-region", actor=ADMIN)
    cluster = regions.create_cluster(
        region, name="far", provisioner="static", broker_count=1, actor=ADMIN
    )
    process = BrokerProcess(tmp_path / "b1", broker_id=1, extra_args=["--cluster-id", "far"])
    try:
        process.start()
        regions.register_broker(
            cluster, broker_id=1, host="127.0.0.1", port=process.port, actor=ADMIN
        )
        yield cluster, process
    finally:
        stop_all([process])


def produce_one(process: BrokerProcess, topic: str) -> Any:
    request = broker_pb2.ProduceRequest(
        acks=1,
        partitions=[
            broker_pb2.PartitionRecords(topic=topic, partition=0, records=build_batch([b"r"]))
        ],
    )
    with process.channel() as channel:
        (result,) = broker_pb2_grpc.BrokerStub(channel).Produce(request, timeout=10).results
    return result


def test_a_tenant_over_its_storage_quota_is_refused_by_the_brokers_after_a_tick(
    far_broker: tuple[Cluster, BrokerProcess], tmp_path: Path
) -> None:
    cluster, process = far_broker
    acme = make_tenant("acme")
    topic = add_topic(cluster, "full", 1)
    create_partitions(topic)
    controller = Controller(
        cluster.region.name,
        "c1",
        FileLease(tmp_path / "quota.lock"),
        provisioner_for=get_provisioner,
        pusher=MetadataPusher(timeout_s=5.0),
    )
    Quota.objects.filter(tenant=acme).update(max_storage_bytes=100)
    PartitionAssignment.objects.filter(topic=topic).update(size_bytes=101)
    controller.tick()
    refused = produce_one(process, topic.full_name)
    assert refused.error == ErrorCode.QUOTA_EXCEEDED
    assert "max_storage_bytes quota of 100" in refused.error_message

    Quota.objects.filter(tenant=acme).update(max_storage_bytes=10**9)
    controller.tick()
    assert produce_one(process, topic.full_name).error == ErrorCode.NONE
    controller.close()
