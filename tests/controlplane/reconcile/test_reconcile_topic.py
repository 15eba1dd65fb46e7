"""``reconcile_topic`` against three real broker processes: create, config change,
delete, a broker down (transient), a permanent refusal, and a newer desired change."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db.models import F

from controlplane.core.models import AuditEvent
from controlplane.gateway import admin as broker_rpc
from controlplane.gateway.errors import BrokerUnavailable
from controlplane.regions.models import Cluster
from controlplane.topics import services
from controlplane.topics.models import PartitionAssignment, Topic
from controlplane.topics.reconcile import Outcome, reconcile_topic
from tests.controlplane.reconcile import admin
from tests.controlplane.reconcile.conftest import OPERATOR
from tests.support.brokers import BrokerProcess

NewTopic = Callable[..., Topic]


def _where(topic: Topic) -> dict[int, int]:
    """partition -> broker id, as the control plane assigned it."""
    return dict(topic.assignments.values_list("partition", "broker__broker_id"))


def _on_brokers(cluster: list[BrokerProcess], name: str) -> dict[int, int]:
    """partition -> broker id, as the brokers report it."""
    return {p: b.broker_id for b in cluster for (_, p) in admin.hosted(b, name)}


def test_creates_partitions_on_their_brokers_and_the_topic_becomes_ready(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("orders", partitions=5, retention_ms=3_600_000, durability="always")

    assert reconcile_topic(topic.pk) == Outcome.READY

    topic.refresh_from_db()
    assert (topic.status, topic.observed_generation) == ("ready", topic.generation)
    assert _on_brokers(cluster, "acme.orders") == _where(topic)
    assert set(_where(topic).values()) == {1, 2, 3}
    config = admin.hosted(cluster[0], "acme.orders")[("acme.orders", 0)].config  # type: ignore[attr-defined]
    assert (config.retention_ms, config.durability) == (3_600_000, "always")
    assert set(topic.assignments.values_list("status", flat=True)) == {"ready"}
    event = AuditEvent.objects.get(action="topic.ready")
    assert (event.actor, event.object_id) == ("system:reconciler", str(topic.pk))
    assert reconcile_topic(topic.pk) == Outcome.UNCHANGED


def test_a_config_change_and_new_partitions_are_applied(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("orders", partitions=2)
    reconcile_topic(topic.pk)
    topic = services.update_topic(
        topic, actor=OPERATOR, retention_ms=120_000, max_message_bytes=2048, partitions=4
    )
    assert topic.status == "pending"

    assert reconcile_topic(topic.pk) == Outcome.READY

    states = {key: s for b in cluster for key, s in admin.hosted(b, "acme.orders").items()}
    assert sorted(p for _, p in states) == [0, 1, 2, 3]
    assert {(s.config.retention_ms, s.config.max_message_bytes) for s in states.values()} == {  # type: ignore[attr-defined]
        (120_000, 2048)
    }
    topic.refresh_from_db()
    assert (topic.status, topic.observed_generation) == ("ready", topic.generation)


def test_delete_removes_the_partitions_then_the_rows(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("orders", partitions=3)
    reconcile_topic(topic.pk)
    services.delete_topic(topic, actor=OPERATOR)

    assert reconcile_topic(topic.pk) == Outcome.DELETED

    assert _on_brokers(cluster, "acme.orders") == {}
    assert not Topic.objects.filter(pk=topic.pk).exists()
    assert not PartitionAssignment.objects.filter(topic_id=topic.pk).exists()
    event = AuditEvent.objects.get(action="topic.deleted")
    assert event.actor == "system:reconciler"
    assert event.before["full_name"] == "acme.orders"
    assert reconcile_topic(topic.pk) == Outcome.GONE


def test_a_broker_down_is_transient_and_the_topic_is_not_failed(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("orders", partitions=3)
    cluster[1].kill()

    with pytest.raises(BrokerUnavailable):
        reconcile_topic(topic.pk)
    topic.refresh_from_db()
    assert (topic.status, topic.observed_generation) == ("provisioning", 0)

    cluster[1].start()
    assert reconcile_topic(topic.pk) == Outcome.READY
    assert _on_brokers(cluster, "acme.orders") == _where(topic)


def test_a_permanent_refusal_fails_the_topic_with_the_reason(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("refused", partitions=1)
    # A name the brokers refuse for good (over 200 characters in all): the API refuses it
    # too now, but a row written before that rule, or by hand, may hold one.
    Topic.objects.filter(pk=topic.pk).update(name="x" * 199, full_name="acme." + "x" * 199)

    assert reconcile_topic(topic.pk) == Outcome.FAILED

    topic.refresh_from_db()
    assert topic.status == "failed"
    assert "INVALID_TOPIC" in topic.status_reason
    assert AuditEvent.objects.filter(action="topic.failed", object_id=str(topic.pk)).exists()


def test_a_newer_desired_change_is_not_marked_ready_by_an_older_run(
    cluster: list[BrokerProcess],
    cluster_row: Cluster,
    new_topic: NewTopic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = new_topic("orders", partitions=1)
    real = broker_rpc.ensure_partitions

    def racing_update(address: str, specs: list[object]) -> set[tuple[str, int]]:
        changed = real(address, specs)  # type: ignore[arg-type]
        Topic.objects.filter(pk=topic.pk).update(generation=F("generation") + 1, status="pending")
        return changed

    monkeypatch.setattr(broker_rpc, "ensure_partitions", racing_update)

    assert reconcile_topic(topic.pk) == Outcome.SUPERSEDED

    topic.refresh_from_db()
    assert (topic.status, topic.generation, topic.observed_generation) == ("pending", 2, 0)


def test_every_replica_of_a_replicated_topic_is_created_and_deleted(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("replicated", partitions=2, replication_factor=3)
    assert reconcile_topic(topic.pk) == Outcome.READY
    for broker in cluster:
        assert sorted(admin.hosted(broker, "acme.replicated")) == [
            ("acme.replicated", 0),
            ("acme.replicated", 1),
        ]
    services.delete_topic(topic, actor=OPERATOR)
    assert reconcile_topic(topic.pk) == Outcome.DELETED
    assert all(not admin.hosted(b, "acme.replicated") for b in cluster)
