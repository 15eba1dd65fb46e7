"""Tiered storage settings reach real brokers: a topic's ``remote_storage``, local
retentions, segment settings and ``topic_id`` are in the config its brokers report; a
partition without an id gets the topic's from the drift pass; one with another topic's
id is reported (``identity``), never retried, while its other settings are still healed;
deleting a tiered topic deletes its objects from the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.regions.models import Cluster
from controlplane.regions.remote_store import open_store
from controlplane.tenants.models import Tenant
from controlplane.topics import services
from controlplane.topics.models import DriftFinding, Topic
from controlplane.topics.reconcile import reconcile_cluster, reconcile_topic
from dataplane.tiered import deletion, layout
from tests.controlplane.reconcile import admin
from tests.controlplane.reconcile.conftest import OPERATOR
from tests.support.brokers import BrokerProcess, start_cluster, stop_all, wait_for_cluster
from tests.support.controlplane import make_tenant, register_static_cluster


@pytest.fixture
def tiered(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    """Three brokers with an object store (a folder)."""
    store = tmp_path / "objects"
    store.mkdir()
    brokers = start_cluster(tmp_path, 3, extra_args=["--remote-store-uri", str(store)])
    try:
        wait_for_cluster(brokers)
        yield brokers
    finally:
        stop_all(brokers)


@pytest.fixture
def tiered_row(db: None, tiered: list[BrokerProcess], tmp_path: Path) -> Cluster:
    cluster = register_static_cluster(tiered)
    cluster.remote_store_uri = str(tmp_path / "objects")
    cluster.save(update_fields=["remote_store_uri"])
    return cluster


@pytest.fixture
def acme(tiered_row: Cluster) -> Tenant:
    return make_tenant("acme", region=tiered_row.region)


def _owner(brokers: list[BrokerProcess], topic: Topic, partition: int = 0) -> BrokerProcess:
    broker_id = topic.assignments.get(partition=partition).broker.broker_id
    return next(b for b in brokers if b.broker_id == broker_id)


def _config(broker: BrokerProcess, topic: str, partition: int = 0) -> object:
    return admin.hosted(broker, topic)[(topic, partition)].config  # type: ignore[attr-defined]


def test_tiered_settings_and_the_topic_id_reach_every_replica(
    tiered: list[BrokerProcess], acme: Tenant
) -> None:
    topic = services.create_topic(
        acme, name="orders", partitions=1, replication_factor=3, remote_storage=True,
        local_retention_ms=600_000, local_retention_bytes=2**20, actor=OPERATOR,
    )  # fmt: skip
    reconcile_topic(topic.pk)

    for broker in tiered:
        config = _config(broker, "acme.orders")
        assert (
            config.remote_storage,  # type: ignore[attr-defined]
            config.local_retention_ms,  # type: ignore[attr-defined]
            config.local_retention_bytes,  # type: ignore[attr-defined]
            config.topic_id,  # type: ignore[attr-defined]
        ) == (True, 600_000, 2**20, str(topic.pk))

    services.update_topic(topic, local_retention_ms=300_000, actor=OPERATOR)
    reconcile_topic(topic.pk)
    assert _config(tiered[0], "acme.orders").local_retention_ms == 300_000  # type: ignore[attr-defined]


def test_a_partition_made_before_ids_gets_the_topics_id(
    tiered: list[BrokerProcess], tiered_row: Cluster, acme: Tenant
) -> None:
    topic = services.create_topic(acme, name="orders", partitions=1, replication_factor=1,
                                  actor=OPERATOR)  # fmt: skip
    reconcile_topic(topic.pk)
    owner = _owner(tiered, topic)
    admin.delete(owner, "acme.orders", 0)  # made again as an older control plane did: no id
    admin.create(owner, "acme.orders", 0, retention_ms=topic.retention_ms,
                 retention_bytes=topic.retention_bytes, max_message_bytes=topic.max_message_bytes,
                 durability=topic.durability)  # fmt: skip
    assert _config(owner, "acme.orders").topic_id == ""  # type: ignore[attr-defined]

    reconcile_cluster(tiered_row.pk)

    assert _config(owner, "acme.orders").topic_id == str(topic.pk)  # type: ignore[attr-defined]
    finding = DriftFinding.objects.get(kind="config")
    assert finding.healed
    assert "topic_id" in finding.detail


def test_another_topics_id_is_reported_not_retried_and_the_rest_still_healed(
    tiered: list[BrokerProcess], tiered_row: Cluster, acme: Tenant
) -> None:
    topic = services.create_topic(acme, name="orders", partitions=1, replication_factor=1,
                                  actor=OPERATOR)  # fmt: skip
    reconcile_topic(topic.pk)
    owner = _owner(tiered, topic)
    admin.delete(owner, "acme.orders", 0)
    admin.create(owner, "acme.orders", 0, topic_id="someone-else", retention_ms=61_000)

    for _ in range(2):
        reconcile_cluster(tiered_row.pk)

    config = _config(owner, "acme.orders")
    assert config.topic_id == "someone-else"  # type: ignore[attr-defined]
    assert config.retention_ms == topic.retention_ms  # type: ignore[attr-defined]
    identity = DriftFinding.objects.get(kind="identity")
    assert (identity.healed, identity.resolved_at) == (False, None)
    assert "someone-else" in identity.detail
    config_findings = DriftFinding.objects.filter(kind="config")
    assert [f.healed for f in config_findings] == [True]  # healed once, not again


def test_a_partition_tiered_behind_the_topics_back_is_reported_and_the_rest_healed(
    tiered: list[BrokerProcess], tiered_row: Cluster, acme: Tenant
) -> None:
    topic = services.create_topic(acme, name="orders", partitions=1, replication_factor=1,
                                  actor=OPERATOR)  # fmt: skip
    reconcile_topic(topic.pk)
    owner = _owner(tiered, topic)
    admin.alter(owner, "acme.orders", 0, remote_storage=True, retention_ms=61_000)

    for _ in range(2):
        reconcile_cluster(tiered_row.pk)

    config = _config(owner, "acme.orders")
    assert config.remote_storage  # type: ignore[attr-defined]
    assert config.retention_ms == topic.retention_ms  # type: ignore[attr-defined]
    finding = DriftFinding.objects.get(kind="remote_storage")
    assert (finding.healed, finding.resolved_at) == (False, None)
    assert [f.healed for f in DriftFinding.objects.filter(kind="config")] == [True]


def test_deleting_a_tiered_topic_deletes_its_objects_from_the_store(
    tiered: list[BrokerProcess], tiered_row: Cluster, acme: Tenant
) -> None:
    topic = services.create_topic(acme, name="orders", partitions=1, replication_factor=3,
                                  remote_storage=True, actor=OPERATOR)  # fmt: skip
    reconcile_topic(topic.pk)
    store = open_store(tiered_row)
    key = f"{layout.partition_prefix('acme.orders', str(topic.pk), 0)}/uploaded-before"
    store.put_bytes(key, b"records")

    services.delete_topic(topic, actor=OPERATOR)
    assert str(reconcile_topic(topic.pk)) == "deleted"

    assert not store.exists(key)
    assert deletion.incarnations(store) == []
    assert all(admin.hosted(b, "acme.orders") == {} for b in tiered)


def test_segment_settings_reach_every_replica_and_drift_heals_them(
    tiered: list[BrokerProcess], tiered_row: Cluster, acme: Tenant
) -> None:
    """A tiered topic's segments are sealed (hence uploaded) at its ``max_segment_bytes``
    or ``segment_ms``: both reach its brokers, a change follows, and a broker altered
    behind the topic's back gets them back from the drift pass."""
    topic = services.create_topic(
        acme, name="history", partitions=1, replication_factor=3, remote_storage=True,
        max_segment_bytes=2**20, segment_ms=60_000, actor=OPERATOR,
    )  # fmt: skip
    reconcile_topic(topic.pk)

    for broker in tiered:
        config = _config(broker, "acme.history")
        assert (config.max_segment_bytes, config.segment_ms) == (2**20, 60_000)  # type: ignore[attr-defined]

    services.update_topic(topic, max_segment_bytes=4 * 2**20, actor=OPERATOR)
    reconcile_topic(topic.pk)
    assert _config(tiered[0], "acme.history").max_segment_bytes == 4 * 2**20  # type: ignore[attr-defined]

    owner = _owner(tiered, topic)
    admin.alter(owner, "acme.history", 0, segment_ms=3_600_000)
    reconcile_cluster(tiered_row.pk)

    assert _config(owner, "acme.history").segment_ms == 60_000  # type: ignore[attr-defined]
    finding = DriftFinding.objects.get(kind="config")
    assert finding.healed
    assert "segment_ms" in finding.detail
