"""The drift pass against broker answers made up here (states no test can bring a real
broker to: a store down for minutes, a tiered partition made by an older broker without
an id): a leader whose uploads are behind is reported and its remote size copied onto
the assignment; an id the broker refuses is reported once and never sent again."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from django.test import override_settings

from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.gateway import admin as gateway
from controlplane.gateway.errors import BrokerRefusedError
from controlplane.regions.models import Broker, Cluster
from controlplane.topics import services
from controlplane.topics.drift import desired_config, reconcile_cluster
from controlplane.topics.models import DriftFinding, PartitionAssignment, Topic
from dataplane._gen.meridian.v1 import admin_pb2
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant

SYSTEM = Actor.system("tests")
LIMIT_MS = 300_000


@pytest.fixture
def topic(db: None) -> Topic:
    cluster = make_cluster("local", brokers=1)
    Cluster.objects.filter(pk=cluster.pk).update(remote_store_uri="/srv/objects")
    tenant = make_tenant("acme")
    topic = services.create_topic(
        tenant, name="orders", partitions=1, replication_factor=1, remote_storage=True,
        actor=SYSTEM,
    )  # fmt: skip
    Topic.objects.filter(pk=topic.pk).update(
        status=ProvisioningStatus.READY, observed_generation=topic.generation
    )
    leader = Broker.objects.get(cluster=cluster)
    PartitionAssignment.objects.filter(topic=topic).update(leader=leader)
    topic.refresh_from_db()
    return topic


def _answer(
    topic: Topic, upload_lag_ms: int, topic_id: str | None = None
) -> admin_pb2.DescribeStateResponse:
    config = desired_config(topic).to_proto()
    if topic_id is not None:
        config.topic_id = topic_id
    return admin_pb2.DescribeStateResponse(
        partitions=[
            admin_pb2.PartitionState(
                topic=topic.full_name,
                partition=0,
                config=config,
                role="leader",
                leader_epoch=0,
                size_bytes=4096,
                remote_bytes=1_000_000,
                remote_only_bytes=900_000,
                remote_segments=3,
                upload_lag_ms=upload_lag_ms,
            )
        ]
    )


def _brokers_answer(
    monkeypatch: pytest.MonkeyPatch, answer: admin_pb2.DescribeStateResponse
) -> None:
    def describe_state(address: str, topics: Iterable[str] = ()) -> object:
        return answer

    monkeypatch.setattr(gateway, "describe_state", describe_state)


@override_settings(TIER_UPLOAD_LAG_FINDING_MS=LIMIT_MS)
def test_uploads_behind_are_a_finding_until_they_catch_up(
    topic: Topic, monkeypatch: pytest.MonkeyPatch
) -> None:
    _brokers_answer(monkeypatch, _answer(topic, upload_lag_ms=LIMIT_MS + 60_000))

    report = reconcile_cluster(topic.cluster_id)

    assert [f.kind for f in report.findings] == ["upload_lag"]
    finding = DriftFinding.objects.get(kind="upload_lag")
    assert (finding.topic_name, finding.partition, finding.healed) == ("acme.orders", 0, False)
    assert "uploads are behind" in finding.detail
    assert "object store may be unreachable" in finding.detail
    row = PartitionAssignment.objects.get(topic=topic)
    assert (row.size_bytes, row.remote_bytes, row.remote_only_bytes) == (4096, 1_000_000, 900_000)

    _brokers_answer(monkeypatch, _answer(topic, upload_lag_ms=1_000))
    reconcile_cluster(topic.cluster_id)

    finding.refresh_from_db()
    assert finding.resolved_at is not None


@override_settings(TIER_UPLOAD_LAG_FINDING_MS=LIMIT_MS)
def test_a_follower_lagging_is_not_judged(topic: Topic, monkeypatch: pytest.MonkeyPatch) -> None:
    PartitionAssignment.objects.filter(topic=topic).update(leader=None)
    answer = _answer(topic, upload_lag_ms=LIMIT_MS * 10)
    answer.partitions[0].role = "follower"
    _brokers_answer(monkeypatch, answer)

    reconcile_cluster(topic.cluster_id)

    assert not DriftFinding.objects.filter(kind="upload_lag").exists()


def test_an_id_the_broker_refuses_is_a_finding_not_a_retry_at_every_pass(
    topic: Topic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tiered partition without an id (an older broker made it; segments may be in the
    store under none): the broker refuses to take one."""
    _brokers_answer(monkeypatch, _answer(topic, upload_lag_ms=0, topic_id=""))
    sent: list[list[str]] = []

    def refuse(address: str, specs: list[admin_pb2.PartitionSpec]) -> set[object]:
        sent.append([spec.config.topic_id for spec in specs])
        raise BrokerRefusedError("acme.orders-0: INVALID_CONFIG: topic_id cannot change")

    monkeypatch.setattr(gateway, "ensure_partitions", refuse)

    first = reconcile_cluster(topic.cluster_id)

    assert sent == [[str(topic.pk)]]
    assert sorted((f.kind, f.healed) for f in first.findings) == [
        ("config", False),
        ("identity", False),
    ]
    identity = DriftFinding.objects.get(kind="identity")
    assert "does not take the topic's id" in identity.detail
    assert "INVALID_CONFIG" in identity.detail

    second = reconcile_cluster(topic.cluster_id)

    assert sent == [[str(topic.pk)]]  # not sent again
    assert [f.kind for f in second.findings] == ["identity"]
    identity.refresh_from_db()
    assert identity.resolved_at is None
    assert DriftFinding.objects.get(kind="config").resolved_at is not None
