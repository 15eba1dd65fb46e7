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
from controlplane.mirrors import identity, progress, services
from controlplane.mirrors.models import MirrorLink, MirrorOffsetPoint, MirrorPartition, MirrorWorker
from controlplane.mirrors.workers import desired_workers
from controlplane.topics.acls import grant_topic_acl
from controlplane.topics.models import TopicAcl
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
