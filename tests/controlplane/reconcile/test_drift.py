"""``reconcile_cluster`` against three real broker processes: a partition deleted or
altered behind the control plane's back is healed; one nobody wants is reported and
kept; findings that disappear are resolved; observed sizes reach the assignments."""

from __future__ import annotations

from collections.abc import Callable

from controlplane.regions.models import Cluster
from controlplane.topics.models import DriftFinding, PartitionAssignment, Topic
from controlplane.topics.reconcile import reconcile_cluster, reconcile_topic
from dataplane.client import Producer
from tests.controlplane.reconcile import admin
from tests.support.brokers import BrokerProcess

NewTopic = Callable[..., Topic]


def _ready_topic(new_topic: NewTopic, name: str = "orders", partitions: int = 3) -> Topic:
    topic = new_topic(name, partitions=partitions)
    reconcile_topic(topic.pk)
    return topic


def _broker_of(cluster: list[BrokerProcess], topic: Topic, partition: int) -> BrokerProcess:
    broker_id = topic.assignments.get(partition=partition).broker.broker_id
    return next(b for b in cluster if b.broker_id == broker_id)


def test_a_partition_deleted_behind_its_back_is_created_again(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = _ready_topic(new_topic)
    owner = _broker_of(cluster, topic, 1)
    admin.delete(owner, "acme.orders", 1)

    report = reconcile_cluster(cluster_row.pk)

    assert ("acme.orders", 1) in admin.hosted(owner, "acme.orders")
    finding = DriftFinding.objects.get(kind="missing")
    assert (finding.topic_name, finding.partition, finding.healed) == ("acme.orders", 1, True)
    assert finding.broker.broker_id == owner.broker_id
    assert finding.resolved_at is not None  # healed on the spot
    assert [f.kind for f in report.findings] == ["missing"]
    assert report.unreachable == []


def test_a_config_changed_behind_its_back_is_restored(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = _ready_topic(new_topic, partitions=1)
    owner = _broker_of(cluster, topic, 0)
    admin.alter(owner, "acme.orders", 0, retention_ms=61_000)

    reconcile_cluster(cluster_row.pk)

    state = admin.hosted(owner, "acme.orders")[("acme.orders", 0)]
    assert state.config.retention_ms == topic.retention_ms  # type: ignore[attr-defined]
    finding = DriftFinding.objects.get(kind="config")
    assert finding.healed
    assert "retention_ms" in finding.detail


def test_an_unknown_partition_is_reported_and_kept_until_it_goes(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    _ready_topic(new_topic, partitions=1)
    admin.create(cluster[2], "acme.stray", 0)

    reconcile_cluster(cluster_row.pk)
    reconcile_cluster(cluster_row.pk)  # seen again: still one open finding

    assert ("acme.stray", 0) in admin.hosted(cluster[2], "acme.stray")
    finding = DriftFinding.objects.get(kind="unknown")
    assert (finding.topic_name, finding.healed, finding.resolved_at) == ("acme.stray", False, None)
    assert finding.broker.broker_id == 3

    admin.delete(cluster[2], "acme.stray", 0)
    report = reconcile_cluster(cluster_row.pk)

    finding.refresh_from_db()
    assert finding.resolved_at is not None
    assert report.resolved == 1


def test_topics_still_converging_are_not_drift(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    new_topic("orders", partitions=3)  # assigned, not reconciled: nothing on the brokers

    report = reconcile_cluster(cluster_row.pk)

    assert report.findings == []
    assert admin.hosted(cluster[0], "acme.orders") == {}


def test_observed_sizes_and_offsets_are_copied_to_the_assignments(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = _ready_topic(new_topic, partitions=1)
    with Producer([b.address for b in cluster]) as producer:
        for _i in range(10):
            producer.send("acme.orders", b"x" * 100, partition=0)
        producer.flush(timeout=10)

    reconcile_cluster(cluster_row.pk)

    row = PartitionAssignment.objects.get(topic=topic, partition=0)
    assert row.log_end_offset == 10
    assert row.size_bytes > 1000
    assert row.observed_at is not None


def test_a_broker_down_is_skipped_and_the_others_are_checked(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = _ready_topic(new_topic, partitions=3)
    cluster[0].kill()
    survivor = _broker_of(cluster, topic, 1)
    admin.delete(survivor, "acme.orders", 1)

    report = reconcile_cluster(cluster_row.pk)

    assert report.unreachable == [str(cluster_row.brokers.get(broker_id=1))]
    assert report.brokers_checked == 2
    assert ("acme.orders", 1) in admin.hosted(survivor, "acme.orders")


def test_every_replica_is_checked_and_a_replica_in_the_wrong_role_is_reported(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    from controlplane.controller.leaders import metadata_request
    from controlplane.controller.push import MetadataPusher

    topic = new_topic("replicated", partitions=1, replication_factor=3)
    reconcile_topic(topic.pk)
    follower = next(b for b in cluster if b.broker_id == topic.assignments.get().replicas[1])
    admin.delete(follower, "acme.replicated", 0)
    row = topic.assignments.get()
    PartitionAssignment.objects.filter(pk=row.pk).update(leader=row.broker)  # elected, epoch 0

    reconcile_cluster(cluster_row.pk)

    assert ("acme.replicated", 0) in admin.hosted(follower, "acme.replicated")  # re-created
    missing = DriftFinding.objects.get(kind="missing")
    assert missing.broker.broker_id == follower.broker_id
    # No push told the followers: each believes it leads its copy (the copy re-created
    # in this pass is judged in the next one).
    wrong = DriftFinding.objects.filter(kind="role", resolved_at__isnull=True)
    assert [f.broker.broker_id for f in wrong] == [row.replicas[2]]
    assert "reports leader at leader epoch 0; the controller's: follower at 0" in wrong[0].detail
    reconcile_cluster(cluster_row.pk)
    wrong = DriftFinding.objects.filter(kind="role", resolved_at__isnull=True)
    assert sorted(f.broker.broker_id for f in wrong) == sorted(row.replicas[1:])

    brokers = list(cluster_row.brokers.all())
    request = metadata_request(cluster_row, brokers, controller_id="test", epoch=1)
    request.cluster_id = "meridian"  # the test brokers' own cluster id
    outcomes = MetadataPusher(timeout_s=5).push(brokers, request)
    assert all(o.response is not None for o in outcomes.values()), outcomes
    reconcile_cluster(cluster_row.pk)
    assert not DriftFinding.objects.filter(kind="role", resolved_at__isnull=True).exists()
