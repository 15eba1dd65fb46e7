"""What the controllers use: the worker specs of a region (legs, topics, checkpoints,
a config hash that ignores the checkpoints), stored statuses (progress, offset-map
points deduplicated, another generation ignored), health, and the worker identity
(made once per leg, a new secret per start, ACLs only beside others', deleted with
the link)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane.accounts.local import secret_matches
from controlplane.accounts.models import ServiceAccount
from controlplane.accounts.services import ManagedAccount, delete_service_account
from controlplane.core.errors import InvalidRequest
from controlplane.mirrors import identity, progress, services
from controlplane.mirrors.models import MirrorLink, MirrorOffsetPoint, MirrorPartition, MirrorWorker
from controlplane.mirrors.workers import desired_workers
from controlplane.topics import services as topic_services
from controlplane.topics.acls import grant_topic_acl
from controlplane.topics.models import Topic, TopicAcl
from tests.controlplane.mirrors.support import (
    SYSTEM,
    converge,
    copy_of,
    link,
    mirror_tenant,
    region,
    topic,
    two_regions,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def made(local_identity: Any) -> MirrorLink:
    two_regions()
    tenant = mirror_tenant()
    origin = topic(tenant, partitions=3)
    created = link(tenant, direction="two-way")
    converge(origin, copy_of("acme.orders"))
    return created


def _worker(link_row: MirrorLink, from_name: str = "east", to_name: str = "west") -> MirrorWorker:
    worker: MirrorWorker = MirrorWorker.objects.create(
        link=link_row, from_region=region(from_name), to_region=region(to_name), generation=3
    )
    return worker


def _status(worker: MirrorWorker, **partition: Any) -> dict[str, Any]:
    row = {"source_topic": "acme.orders", "target_topic": "acme.orders", "partition": 0,
           "state": "copying", "next_source_offset": 5, "source_end_offset": 5,
           "lag_records": 0, "lag_seconds": 0.0, "error": "", **partition}  # fmt: skip
    return {"link_id": worker.link_id, "generation": worker.generation, "partitions": [row],
            "points": []}  # fmt: skip


def test_each_region_runs_the_legs_that_end_there(made: MirrorLink) -> None:
    (west,) = desired_workers("west")
    (east,) = desired_workers(region("east"))
    assert (west.from_region, west.to_region, east.from_region, east.to_region) == (
        "east", "west", "west", "east",
    )  # fmt: skip
    assert west.config == {
        "link": "acme/orders-west", "link_id": made.pk, "from_region": "east",
        "to_region": "west",
        "topics": [{"source": "acme.orders", "target": "acme.orders", "partitions": [0, 1, 2]}],
        "start": {"position": "earliest"}, "checkpoints": {},
        "checkpoint_interval_ms": 5000,
        "batch": {"max_records": 5000, "max_bytes": 4194304, "linger_ms": 5},
    }  # fmt: skip
    assert west.source_cluster_id != west.target_cluster_id
    services.update_link(made, paused=True, actor=SYSTEM)
    assert desired_workers("west") == desired_workers("east") == []


def test_a_copy_not_yet_on_its_brokers_is_not_in_a_worker_config() -> None:
    two_regions()
    tenant = mirror_tenant()
    origin = topic(tenant)
    link(tenant)
    assert desired_workers("west") == []
    converge(origin, copy_of("acme.orders"))
    assert len(desired_workers("west")) == 1


def test_checkpoints_are_the_newest_points_and_do_not_change_the_hash(made: MirrorLink) -> None:
    before = desired_workers("west")[0]
    worker = _worker(made)
    status = _status(worker)
    status["points"] = [
        {"topic": "acme.orders", "partition": 0, "source_offset": s, "target_offset": s + 100}
        for s in (10, 20, 20, 30)
    ]
    assert progress.record_status(worker, status)
    assert progress.record_status(worker, status)  # the same points again: stored once
    assert MirrorOffsetPoint.objects.count() == 3
    after = desired_workers("west")[0]
    assert after.config["checkpoints"] == {
        "acme.orders/0": {"source_offset": 30, "target_offset": 130}
    }
    assert after.config_hash == before.config_hash
    services.update_link(made, start_position="latest", actor=SYSTEM)
    assert desired_workers("west")[0].config_hash != before.config_hash


def test_a_status_of_another_generation_is_not_stored(made: MirrorLink) -> None:
    worker = _worker(made)
    stale = {**_status(worker), "generation": 2}
    assert not progress.record_status(worker, stale)
    assert not MirrorPartition.objects.exists()
    worker.refresh_from_db()
    assert worker.last_status_at is None


def test_health_follows_errors_stalls_and_unreadable_workers(
    made: MirrorLink, settings: Any
) -> None:
    settings.MIRROR_STALL_S = 30
    settings.MIRROR_WORKER_TIMEOUT_S = 10
    east_worker, west_worker = _worker(made), _worker(made, "west", "east")
    now = timezone.now()
    assert progress.evaluate_health(made, now=now).health == "starting"
    for worker in (east_worker, west_worker):
        progress.record_status(worker, _status(worker), now=now)
    assert progress.evaluate_health(made, now=now).health == "ok"
    # An error for longer than the stall time degrades the link, naming it.
    progress.record_status(east_worker, _status(east_worker, error="source unreachable",
                                                 state="error"), now=now)  # fmt: skip
    later = now + timedelta(seconds=31)
    progress.record_status(west_worker, _status(west_worker), now=later)
    progress.record_status(east_worker, _status(east_worker, error="source unreachable",
                                                 state="error"), now=later)  # fmt: skip
    degraded = progress.evaluate_health(made, now=later)
    assert degraded.health == "degraded"
    assert "source unreachable" in degraded.health_reason
    assert MirrorLink.objects.get().health == "degraded"
    # Behind with no progress.
    progress.record_status(east_worker, _status(east_worker, lag_records=7), now=later)
    stalled = later + timedelta(seconds=31)
    for worker in (east_worker, west_worker):
        progress.record_status(worker, _status(worker, lag_records=7), now=stalled)
    assert "7 records behind" in progress.evaluate_health(made, now=stalled).health_reason
    # Moving again: ok.
    moved = stalled + timedelta(seconds=1)
    for worker in (east_worker, west_worker):
        progress.record_status(worker, _status(worker, next_source_offset=6), now=moved)
    assert progress.evaluate_health(made, now=moved).health == "ok"
    # A worker whose status is not read for the timeout.
    unread = moved + timedelta(seconds=11)
    progress.record_status(west_worker, _status(west_worker, next_source_offset=6), now=unread)
    unreadable = progress.evaluate_health(made, now=unread)
    assert (unreadable.health, "has not been read" in unreadable.health_reason) == (
        "degraded", True,
    )  # fmt: skip


def test_a_worker_identity_per_leg_with_a_new_secret_per_start(made: MirrorLink) -> None:
    client_id, secret = identity.worker_credentials(made)
    account = ServiceAccount.objects.get(client_id=client_id)
    assert client_id == f"acme--mirror-{made.pk}-{made.source_region_id}"
    assert account.managed_by_link_id == made.pk
    assert secret_matches(secret, account.secret_hash)
    again_id, again = identity.worker_credentials(made)
    account.refresh_from_db()
    assert again_id == client_id
    assert secret_matches(again, account.secret_hash)
    assert not secret_matches(secret, account.secret_hash)
    reverse_id, _ = identity.worker_credentials(made, region("west"))
    assert reverse_id != client_id
    with pytest.raises(ManagedAccount):
        delete_service_account(account, actor=SYSTEM)


def test_acl_entries_only_where_the_topic_has_others(made: MirrorLink) -> None:
    client_id, _ = identity.worker_credentials(made)
    assert not TopicAcl.objects.filter(principal=client_id).exists()
    other, _ = identity.accounts.create_service_account(made.tenant, name="app", actor=SYSTEM)
    origin, copy = copy_of("acme.orders", "east"), copy_of("acme.orders")
    grant_topic_acl(copy, principal=other.client_id, operations=["consume"], actor=SYSTEM)
    grant_topic_acl(origin, principal=other.client_id, operations=["produce"], actor=SYSTEM)
    identity.sync_acls(made)
    entries = dict(
        TopicAcl.objects.filter(principal=client_id).values_list(
            "topic__cluster__region__name", "operations"
        )
    )
    assert entries == {"east": ["consume"], "west": ["produce", "consume"]}


def test_deleting_the_link_deletes_its_identities(made: MirrorLink) -> None:
    identity.worker_credentials(made)
    identity.worker_credentials(made, region("west"))
    services.delete_link(made, actor=SYSTEM)
    assert services.finish_deletion(made)
    assert not ServiceAccount.objects.filter(name__startswith="mirror-").exists()


def _points(worker: MirrorWorker, *offsets: int) -> dict[str, Any]:
    status = _status(worker)
    status["points"] = [{"topic": "acme.orders", "partition": 0, "source_offset": s,
                         "target_offset": s + 100} for s in offsets]  # fmt: skip
    return status


def test_a_released_copy_takes_no_offset_map_into_the_next(made: MirrorLink) -> None:
    """Letting a copy go forgets the link's points and progress of it, and a late status
    that still lists it does not bring them back: a copy made again starts afresh."""
    worker = _worker(made)
    assert progress.record_status(worker, _points(worker, 10, 20))
    topic(made.tenant, name="payments")
    services.update_link(made, topics=["payments"], actor=SYSTEM)
    assert not MirrorOffsetPoint.objects.filter(topic="acme.orders").exists()
    assert not MirrorPartition.objects.filter(source_topic="acme.orders").exists()
    assert progress.record_status(worker, _points(worker, 30))
    assert not MirrorOffsetPoint.objects.exists()
    assert not MirrorPartition.objects.exists()
    services.update_link(made, topics=["orders"], actor=SYSTEM)
    converge(*Topic.objects.all())
    assert desired_workers("west")[0].config["checkpoints"] == {}


def test_a_deleted_lane_copy_forgets_its_offset_map(local_identity: Any) -> None:
    two_regions()
    tenant = mirror_tenant()
    origin = topic(tenant)
    lane = topic_services.create_lane_topic(origin, lane="ppe", partitions=3, actor=SYSTEM)
    made = link(tenant, include_lanes=True)
    converge(*Topic.objects.all())
    worker = _worker(made)
    status = _status(worker, source_topic=lane.full_name, target_topic=lane.full_name)
    status["points"] = [{"topic": lane.full_name, "partition": 0, "source_offset": 4,
                         "target_offset": 9}]  # fmt: skip
    assert progress.record_status(worker, status)
    assert MirrorOffsetPoint.objects.filter(topic=lane.full_name).exists()
    topic_services.delete_topic(lane, actor=SYSTEM)
    services.follow_origins()
    assert not MirrorOffsetPoint.objects.filter(topic=lane.full_name).exists()
    assert not MirrorPartition.objects.filter(source_topic=lane.full_name).exists()


def test_worker_errors_are_stored_and_shown_without_addresses(
    made: MirrorLink, settings: Any
) -> None:
    settings.MIRROR_STALL_S = 30
    worker = _worker(made)
    error = (
        "StatusCode.UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: "
        "ipv4:127.0.0.1:4101: Connection refused (broker-1.east:5101, [::1]:7)"
    )
    since = timezone.now() - timedelta(seconds=60)
    status = _status(worker, error=error, state="error",
                     error_since_ms=int(since.timestamp() * 1000))  # fmt: skip
    assert progress.record_status(worker, status)
    stored = MirrorPartition.objects.get().error
    assert stored.startswith("StatusCode.UNAVAILABLE: failed to connect to all addresses")
    for leaked in ("127.0.0.1", "4101", "broker-1.east", "5101", "::1"):
        assert leaked not in stored
    reason = progress.evaluate_health(made).health_reason
    assert "<address>" in reason
    assert "127.0.0.1" not in reason


def test_latest_is_resolved_once_and_every_worker_starts_there(made: MirrorLink) -> None:
    services.update_link(made, start_position="latest", actor=SYSTEM)
    made.refresh_from_db()
    resolved = made.start_timestamp_ms
    assert made.start_position == "latest"
    assert resolved is not None
    services.update_link(made, paused=True, actor=SYSTEM)
    services.update_link(made, paused=False, start_position="latest", actor=SYSTEM)
    made.refresh_from_db()
    assert made.start_timestamp_ms == resolved
    start = desired_workers("west")[0].config["start"]
    assert start == {"position": "timestamp", "timestamp_ms": resolved}
    with pytest.raises(InvalidRequest):
        services.update_link(made, start_timestamp_ms=5, actor=SYSTEM)
    services.update_link(made, start_position="earliest", actor=SYSTEM)
    made.refresh_from_db()
    assert made.start_timestamp_ms is None
    assert desired_workers("west")[0].config["start"] == {"position": "earliest"}


def test_a_worker_identity_may_not_use_the_api(made: MirrorLink) -> None:
    """Its developer role is for the brokers only: the API refuses its tokens."""
    from rest_framework.exceptions import AuthenticationFailed

    from controlplane.accounts.authentication import MIRROR_WORKER_REFUSED, live_actor
    from controlplane.core.actors import Actor

    client_id, _ = identity.worker_credentials(made)
    account = ServiceAccount.objects.get(client_id=client_id)
    worker = Actor(subject=client_id, name=client_id, roles={"acme": "developer"},
                   kind="service", account_id=str(account.uid))  # fmt: skip
    with pytest.raises(AuthenticationFailed, match=MIRROR_WORKER_REFUSED):
        live_actor(worker)
