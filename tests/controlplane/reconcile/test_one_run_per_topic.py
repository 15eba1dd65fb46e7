"""One reconcile run per topic at a time, against three real broker processes: a run
racing a delete or a newer generation, a drift heal racing a delete, a busy topic, the
``updated_at`` touch that keeps the drift pass from enqueuing runs in progress, and a
stranger's partition that a new topic does not adopt.

The races run the two sides in two threads, each with its own database connection
(``transactional_db``, so each sees what the other committed), as two workers would."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from controlplane.gateway import admin as broker_rpc
from controlplane.gateway.errors import BrokerUnavailable
from controlplane.regions.models import Cluster
from controlplane.topics import drift, locks, services, tasks
from controlplane.topics.drift import reconcile_cluster, stale_topic_ids
from controlplane.topics.locks import TopicBusy, topic_lock
from controlplane.topics.models import DriftFinding, Topic
from controlplane.topics.reconcile import Outcome, reconcile_topic
from dataplane.client import Producer
from tests.controlplane.reconcile import admin
from tests.controlplane.reconcile.conftest import OPERATOR
from tests.support.brokers import BrokerProcess

NewTopic = Callable[..., Topic]


@pytest.fixture
def no_enqueue(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Commits run ``on_commit`` here: record the jobs instead of enqueuing them."""
    enqueued: list[int] = []
    monkeypatch.setattr(tasks.reconcile_topic, "delay", enqueued.append)
    return enqueued


def _in_thread(fn: Callable[..., Any], *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn(*args)
        except BaseException as exc:  # reported to the test through ``result``
            result["error"] = exc
        finally:
            connection.close()  # each thread has its own connection

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def _like_celery(topic_id: int) -> Outcome:
    """``reconcile_topic`` retried on ``TopicBusy``, as the Celery task does."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return reconcile_topic(topic_id, lock_wait_s=0.2)
        except TopicBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _pause_first_ensure(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[threading.Event, threading.Event]:
    """Make the first ``ensure_partitions`` call wait (before reaching the broker) until
    ``go`` is set; ``paused`` is set when it waits. Later calls go straight through."""
    real = broker_rpc.ensure_partitions
    paused, go = threading.Event(), threading.Event()
    first = threading.Lock()

    def ensure(address: str, specs: Any) -> set[tuple[str, int]]:
        if first.acquire(blocking=False):
            paused.set()
            assert go.wait(30)
        return real(address, specs)

    monkeypatch.setattr(broker_rpc, "ensure_partitions", ensure)
    return paused, go


def _on_brokers(cluster: list[BrokerProcess], name: str) -> dict[tuple[str, int], Any]:
    return {key: s for b in cluster for key, s in admin.hosted(b, name).items()}


def test_an_apply_run_racing_a_delete_leaves_no_partition_behind(
    transactional_db: None,
    no_enqueue: list[int],
    cluster: list[BrokerProcess],
    cluster_row: Cluster,
    new_topic: NewTopic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = new_topic("orders", partitions=1)
    paused, go = _pause_first_ensure(monkeypatch)
    apply, applied = _in_thread(reconcile_topic, topic.pk)
    assert paused.wait(30)  # the apply run is about to create the partition

    services.delete_topic(Topic.objects.get(pk=topic.pk), actor=OPERATOR)
    delete, deleted = _in_thread(_like_celery, topic.pk)
    delete.join(timeout=2)  # a delete not kept waiting would be done by now
    go.set()
    apply.join(timeout=30)
    delete.join(timeout=30)

    assert applied == {"value": Outcome.SUPERSEDED}
    assert deleted == {"value": Outcome.DELETED}
    assert not Topic.objects.filter(pk=topic.pk).exists()
    assert _on_brokers(cluster, "acme.orders") == {}
    assert reconcile_cluster(cluster_row.pk).findings == []


def test_an_older_runs_config_never_lands_after_a_newer_generation_is_ready(
    transactional_db: None,
    no_enqueue: list[int],
    cluster: list[BrokerProcess],
    cluster_row: Cluster,
    new_topic: NewTopic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = new_topic("orders", partitions=1, retention_ms=3_600_000)
    paused, go = _pause_first_ensure(monkeypatch)
    old, old_result = _in_thread(reconcile_topic, topic.pk)
    assert paused.wait(30)  # generation 1's config is about to be sent

    services.update_topic(Topic.objects.get(pk=topic.pk), actor=OPERATOR, retention_ms=120_000)
    new, new_result = _in_thread(_like_celery, topic.pk)
    new.join(timeout=2)  # a run not kept waiting would have marked generation 2 ready
    go.set()
    old.join(timeout=30)
    new.join(timeout=30)

    assert old_result == {"value": Outcome.SUPERSEDED}
    assert new_result == {"value": Outcome.READY}
    topic.refresh_from_db()
    assert (topic.status, topic.generation, topic.observed_generation) == ("ready", 2, 2)
    (state,) = _on_brokers(cluster, "acme.orders").values()
    assert state.config.retention_ms == 120_000


def test_a_drift_heal_does_not_recreate_a_partition_of_a_topic_deleted_meanwhile(
    cluster: list[BrokerProcess],
    cluster_row: Cluster,
    new_topic: NewTopic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = new_topic("orders", partitions=1)
    assert reconcile_topic(topic.pk) == Outcome.READY
    owner = next(b for b in cluster if admin.hosted(b, "acme.orders"))
    admin.delete(owner, "acme.orders", 0)  # drift the pass will judge "missing"
    real = drift._desired_state

    def then_deleted(cluster: Cluster) -> Any:
        desired = real(cluster)  # judged while the topic was ready
        services.delete_topic(Topic.objects.get(pk=topic.pk), actor=OPERATOR)
        assert reconcile_topic(topic.pk) == Outcome.DELETED
        return desired

    monkeypatch.setattr(drift, "_desired_state", then_deleted)

    report = reconcile_cluster(cluster_row.pk)

    assert _on_brokers(cluster, "acme.orders") == {}
    assert report.findings == []


def test_a_run_that_cannot_get_the_topic_lock_is_retried_later(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("orders", partitions=1)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with topic_lock(topic.pk):
            held.set()
            release.wait(30)

    holder, _ = _in_thread(hold)
    assert held.wait(30)
    try:
        with pytest.raises(TopicBusy):
            reconcile_topic(topic.pk, lock_wait_s=0.2)
    finally:
        release.set()
        holder.join(timeout=30)

    assert TopicBusy in tasks.RETRY["autoretry_for"]
    assert reconcile_topic(topic.pk) == Outcome.READY


def test_a_delete_waiting_for_a_broker_is_not_enqueued_again_by_the_drift_pass(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("orders", partitions=3)
    assert reconcile_topic(topic.pk) == Outcome.READY
    services.delete_topic(topic, actor=OPERATOR)
    Topic.objects.filter(pk=topic.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    assert stale_topic_ids(cluster_row) == [topic.pk]  # its job was lost: enqueue again
    cluster[1].kill()  # holds one of its partitions

    with pytest.raises(BrokerUnavailable):
        reconcile_topic(topic.pk)  # the task retries it

    topic.refresh_from_db()
    assert topic.status == "deleting"
    assert timezone.now() - topic.updated_at < timedelta(seconds=30)
    assert stale_topic_ids(cluster_row) == []


def test_a_permanent_refusal_names_the_broker_by_its_id_and_keeps_its_address_out(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("refused", partitions=1)
    # A name the brokers refuse for good (over 200 characters in all): the API refuses it
    # too now, but a row written before that rule, or by hand, may hold one.
    Topic.objects.filter(pk=topic.pk).update(name="x" * 199, full_name="acme." + "x" * 199)

    assert reconcile_topic(topic.pk) == Outcome.FAILED

    topic.refresh_from_db()
    broker_id = topic.assignments.get().broker.broker_id
    assert topic.status_reason == f"broker {broker_id} refused partition 0: INVALID_TOPIC"
    assert not any(b.address in topic.status_reason for b in cluster)


def test_a_new_topic_does_not_adopt_a_strangers_partition_holding_records(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("orders", partitions=1)  # placed, not yet on any broker
    broker_id = topic.assignments.get().broker.broker_id
    owner = next(b for b in cluster if b.broker_id == broker_id)
    admin.create(owner, "acme.orders", 0, retention_ms=61_000)  # an orphan, with records
    with Producer([b.address for b in cluster]) as producer:
        for _ in range(3):
            producer.send("acme.orders", b"someone else's", partition=0)
        producer.flush(timeout=10)

    assert reconcile_topic(topic.pk) == Outcome.FAILED

    topic.refresh_from_db()
    assert topic.status == "failed"
    assert f"partition 0 already exists on broker {broker_id}" in topic.status_reason
    assert owner.address not in topic.status_reason
    state = admin.hosted(owner, "acme.orders")[("acme.orders", 0)]
    assert (state.log_end_offset, state.config.retention_ms) == (3, 61_000)  # type: ignore[attr-defined]
    finding = DriftFinding.objects.get(kind="unknown", topic_name="acme.orders")
    assert (finding.partition, finding.broker.broker_id, finding.resolved_at) == (
        0,
        broker_id,
        None,
    )

    reconcile_cluster(cluster_row.pk)  # still there: still reported
    finding.refresh_from_db()
    assert finding.resolved_at is None

    services.delete_topic(topic, actor=OPERATOR)
    assert reconcile_topic(topic.pk) == Outcome.DELETED
    assert ("acme.orders", 0) in admin.hosted(owner, "acme.orders")  # an operator's call


def test_an_empty_partition_already_there_is_taken_over(
    cluster: list[BrokerProcess], cluster_row: Cluster, new_topic: NewTopic
) -> None:
    topic = new_topic("orders", partitions=1, retention_ms=3_600_000)
    broker_id = topic.assignments.get().broker.broker_id
    owner = next(b for b in cluster if b.broker_id == broker_id)
    admin.create(owner, "acme.orders", 0, retention_ms=61_000)  # e.g. a timed-out create

    assert reconcile_topic(topic.pk) == Outcome.READY

    state = admin.hosted(owner, "acme.orders")[("acme.orders", 0)]
    assert state.config.retention_ms == 3_600_000  # type: ignore[attr-defined]


def _local_lock(topic_id: int, wait_s: float) -> Any:
    return locks._local_lock(locks.NAMESPACE, topic_id, wait_s, lambda: TopicBusy(topic_id))


def test_the_sqlite_lock_is_per_topic_and_re_entrant_for_its_thread() -> None:
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with _local_lock(1, 0):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(30)
    try:
        with pytest.raises(TopicBusy), _local_lock(1, 0.1):
            pass
        with _local_lock(2, 0), _local_lock(2, 0):  # another topic; nested
            pass
    finally:
        release.set()
        holder.join(timeout=30)
    with _local_lock(1, 0):
        pass
