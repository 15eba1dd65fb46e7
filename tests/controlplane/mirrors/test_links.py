"""Mirror links as the services make them: copies in the target region (same name,
partitions and configuration, following their origin), the typed refusals, the quota,
the audit, pausing and deleting (the copies stay)."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.core.errors import Conflict, InvalidRequest, QuotaExceeded
from controlplane.core.models import AuditEvent
from controlplane.mirrors import services
from controlplane.mirrors.models import MirrorLink
from controlplane.quotas.models import Quota
from controlplane.quotas.services import quota_usage
from controlplane.topics import services as topic_services
from controlplane.topics.models import Topic
from tests.controlplane.mirrors.support import (
    SYSTEM,
    converge,
    copy_of,
    link,
    mirror_tenant,
    topic,
    two_regions,
)
from tests.support.controlplane import make_tenant

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _regions() -> None:
    two_regions()


def test_a_link_makes_a_copy_of_each_topic_in_the_target_region() -> None:
    tenant = mirror_tenant()
    origin = topic(tenant, partitions=3, retention_ms=3_600_000, durability="always")
    made = link(tenant)
    copy = copy_of("acme.orders")
    assert copy.pk != origin.pk
    assert (copy.mirror_of_id, copy.mirror_link_id) == (origin.pk, made.pk)
    assert (copy.name, copy.partitions, copy.retention_ms, copy.durability) == (
        "orders", 3, 3_600_000, "always",
    )  # fmt: skip
    assert copy.cluster.region.name == "west"
    assert made.status == "provisioning"
    event = AuditEvent.objects.get(action="mirror.create")
    assert event.after["topics"] == ["orders"]
    assert event.after["target_region"] == "west"


def test_copies_count_for_partitions_and_storage_not_topics() -> None:
    tenant = mirror_tenant()
    topic(tenant, partitions=3)
    before = quota_usage(tenant)
    link(tenant)
    after = quota_usage(tenant)
    assert after["topics"] == before["topics"] == 1
    assert after["partitions"] == 2 * before["partitions"] == 6
    assert after["storage_bytes"] == 2 * before["storage_bytes"]
    assert after["mirrors"] == 1


def test_a_name_means_the_origin_and_a_region_names_the_copy() -> None:
    tenant = mirror_tenant()
    origin = topic(tenant)
    link(tenant)
    assert Topic.objects.named("acme.orders").get().pk == origin.pk
    assert Topic.objects.named("acme.orders", "west").get() == copy_of("acme.orders")
    assert Topic.objects.named("acme.orders", "east").get().pk == origin.pk


def test_origin_changes_are_followed_by_its_copies() -> None:
    tenant = mirror_tenant()
    origin = topic(tenant, partitions=3)
    link(tenant)
    topic_services.update_topic(origin, partitions=5, retention_ms=7_200_000, actor=SYSTEM)
    copy = copy_of("acme.orders")
    assert (copy.partitions, copy.retention_ms) == (5, 7_200_000)
    assert copy.assignments.count() == 5
    assert copy.status == "pending"


def test_a_copy_is_changed_through_its_origin_and_not_deleted_while_kept() -> None:
    tenant = mirror_tenant()
    origin = topic(tenant)
    link(tenant)
    copy = copy_of("acme.orders")
    with pytest.raises(Conflict) as changing:
        topic_services.update_topic(copy, retention_ms=1000, actor=SYSTEM)
    assert changing.value.code == "mirror_copy"
    with pytest.raises(Conflict) as deleting:
        topic_services.delete_topic(copy, actor=SYSTEM)
    assert deleting.value.code == "mirror_copy"
    with pytest.raises(Conflict) as deleting_origin:
        topic_services.delete_topic(origin, actor=SYSTEM)
    assert deleting_origin.value.code == "mirror_copies_exist"
    assert deleting_origin.value.details["regions"] == ["west"]


def test_a_name_stays_unique_among_origins() -> None:
    tenant = mirror_tenant()
    topic(tenant)
    link(tenant)
    with pytest.raises(Conflict):
        topic_services.create_topic(
            tenant, name="orders", partitions=1, region="west", actor=SYSTEM
        )


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"target_region": "east"}, "same_region"),
        ({"target_region": "north"}, "region_not_allowed"),
        ({"topics": ["missing"]}, "topic_not_found"),
        ({"topics": ["orders"], "topic_pattern": "o.*"}, "topics_or_pattern"),
        ({"topics": [], "topic_pattern": ""}, "topics_or_pattern"),
        ({"topics": [], "topic_pattern": "orders x"}, "invalid_pattern"),
        ({"start_position": "timestamp"}, "invalid"),
        ({"name": "Not A Slug"}, "invalid"),
    ],
)
def test_bad_input_is_refused_with_its_code(fields: dict[str, object], code: str) -> None:
    tenant = mirror_tenant()
    topic(tenant)
    name = str(fields.pop("name", "bad"))
    with pytest.raises(InvalidRequest) as refused:
        link(tenant, name=name, **fields)
    assert refused.value.code == code
    assert not MirrorLink.objects.exists()
    assert not Topic.objects.filter(cluster__region__name="west").exists()


def test_a_region_the_tenant_has_no_quota_in_is_refused_by_name() -> None:
    tenant = make_tenant("solo", region=None)
    tenant.regions.set([])
    with pytest.raises(InvalidRequest) as refused:
        link(tenant)
    assert refused.value.code == "region_not_allowed"
    assert str(refused.value) == "tenant solo has no quota in region east"


def test_another_tenants_topic_answers_like_a_missing_one() -> None:
    acme = mirror_tenant()
    globex = mirror_tenant("globex")
    topic(globex, name="orders")
    with pytest.raises(InvalidRequest) as theirs:
        link(acme, topics=["globex.orders"])
    with pytest.raises(InvalidRequest) as missing:
        link(acme, topics=["nothing"])
    assert theirs.value.code == missing.value.code == "topic_not_found"


def test_a_topic_only_in_the_target_region_is_not_found_in_the_source() -> None:
    tenant = mirror_tenant()
    topic_services.create_topic(tenant, name="orders", partitions=1, region="west", actor=SYSTEM)
    with pytest.raises(InvalidRequest) as refused:
        link(tenant)
    assert refused.value.code == "topic_not_found"


def test_a_target_topic_another_link_made_is_refused() -> None:
    tenant = mirror_tenant()
    topic(tenant)
    link(tenant, name="first")
    with pytest.raises(InvalidRequest) as refused:
        link(tenant, name="second")
    assert refused.value.code == "target_topic_exists"


def test_mirroring_a_copy_back_to_its_origins_region_is_refused() -> None:
    """East holds a copy of a west topic: a copy is no source (records travel one hop)."""
    tenant = mirror_tenant()
    topic_services.create_topic(tenant, name="orders", partitions=1, region="west", actor=SYSTEM)
    link(tenant, name="to-east", source_region="west", target_region="east")
    with pytest.raises(InvalidRequest) as refused:
        link(tenant, name="back")
    assert refused.value.code == "source_is_copy"


def test_max_mirrors_is_a_quota() -> None:
    tenant = mirror_tenant()
    topic(tenant)
    topic(tenant, name="payments")
    Quota.objects.filter(tenant=tenant).update(max_mirrors=1)
    link(tenant)
    with pytest.raises(QuotaExceeded) as refused:
        link(tenant, name="second", topics=["payments"])
    assert refused.value.quota == "max_mirrors"


def test_copies_past_the_partition_quota_are_refused_with_nothing_left() -> None:
    tenant = mirror_tenant()
    topic(tenant, partitions=3)
    Quota.objects.filter(tenant=tenant).update(max_partitions=4)
    with pytest.raises(QuotaExceeded) as refused:
        link(tenant)
    assert refused.value.quota == "max_partitions"
    assert not MirrorLink.objects.exists()


def test_a_pattern_covers_matching_topics_and_picks_up_new_ones() -> None:
    tenant = mirror_tenant()
    topic(tenant, name="orders-eu")
    topic(tenant, name="payments")
    made = link(tenant, topics=[], topic_pattern="orders-*")
    assert set(Topic.objects.filter(mirror_link=made).values_list("name", flat=True)) == {
        "orders-eu"
    }
    topic(tenant, name="orders-us")
    counts = services.follow_origins(made.target_region)
    assert counts["provisioning"] == 1
    assert Topic.objects.filter(mirror_link=made).count() == 2
    converge(*Topic.objects.all())
    assert services.follow_origins()["ready"] == 1
    assert MirrorLink.objects.get().status == "ready"


def test_a_copy_that_cannot_be_made_later_fails_the_link_with_the_reason() -> None:
    tenant = mirror_tenant()
    topic(tenant, name="orders-eu")
    made = link(tenant, topics=[], topic_pattern="orders-*")
    Quota.objects.filter(tenant=tenant).update(max_partitions=9)
    topic(tenant, name="orders-us", partitions=2)  # 3 + 3 + 2 + 2 (its copy) > 9
    assert services.follow_origins()["failed"] == 1
    made.refresh_from_db()
    assert made.status == "failed"
    assert "max_partitions" in made.status_reason


def test_lane_topics_are_copied_beside_their_trunks_copy() -> None:
    tenant = mirror_tenant()
    trunk = topic(tenant, partitions=3)
    lane = topic_services.create_lane_topic(trunk, lane="ppe", partitions=2, actor=SYSTEM)
    link(tenant, include_lanes=True)
    copy = copy_of("acme.orders~ppe")
    assert copy.mirror_of_id == lane.pk
    assert copy.trunk == copy_of("acme.orders")
    assert (copy.lane_name, copy.partitions) == ("ppe", 2)
    topic_services.delete_topic(lane, actor=SYSTEM)
    assert copy_of("acme.orders~ppe").status == "deleting"


def test_a_smaller_copy_left_by_a_deleted_link_is_taken_over_and_grown() -> None:
    tenant = mirror_tenant()
    origin = topic(tenant, partitions=2)
    first = link(tenant, name="first")
    services.delete_link(first, actor=SYSTEM)
    assert services.finish_deletion(first)
    copy = copy_of("acme.orders")
    assert (copy.mirror_of_id, copy.mirror_link_id) == (origin.pk, None)
    topic_services.update_topic(origin, partitions=4, actor=SYSTEM)
    assert copy_of("acme.orders").partitions == 2  # no link keeps it: it does not follow
    second = link(tenant, name="second")
    copy = copy_of("acme.orders")
    assert (copy.mirror_link_id, copy.partitions) == (second.pk, 4)


def test_pausing_and_resuming_is_audited_and_sets_health() -> None:
    tenant = mirror_tenant()
    topic(tenant)
    made = link(tenant)
    paused = services.update_link(made, paused=True, actor=SYSTEM)
    assert (paused.paused, paused.health) == (True, "paused")
    resumed = services.update_link(paused, paused=False, actor=SYSTEM)
    assert (resumed.paused, resumed.health) == (False, "starting")
    assert AuditEvent.objects.filter(action="mirror.update").count() == 2
    services.update_link(resumed, paused=False, actor=SYSTEM)
    assert AuditEvent.objects.filter(action="mirror.update").count() == 2


def test_changing_the_topics_lets_go_of_the_copies_no_longer_covered() -> None:
    tenant = mirror_tenant()
    topic(tenant)
    topic(tenant, name="payments")
    made = link(tenant, topics=["orders", "payments"])
    services.update_link(made, topics=["acme.payments"], actor=SYSTEM)
    assert copy_of("acme.orders").mirror_link_id is None
    assert copy_of("acme.payments").mirror_link_id == made.pk
    made.refresh_from_db()
    assert made.topics == ["payments"]


def test_deleting_a_link_waits_for_its_workers_and_keeps_the_copies() -> None:
    from controlplane.mirrors.models import MirrorWorker

    tenant = mirror_tenant()
    origin = topic(tenant)
    made = link(tenant)
    worker = MirrorWorker.objects.create(
        link=made, from_region=made.source_region, to_region=made.target_region
    )
    deleting = services.delete_link(made, actor=SYSTEM)
    assert deleting.status == "deleting"
    assert AuditEvent.objects.filter(action="mirror.delete").exists()
    with pytest.raises(Conflict):
        services.update_link(deleting, paused=True, actor=SYSTEM)
    assert not services.finish_deletion(deleting)
    assert services.finish_deletions() == 0
    worker.delete()
    assert services.finish_deletions(deleting.target_region) == 1
    assert not MirrorLink.objects.exists()
    copy = copy_of("acme.orders")
    assert (copy.mirror_of_id, copy.mirror_link_id, copy.status) == (origin.pk, None, "pending")
    with pytest.raises(Conflict) as refused:
        topic_services.delete_topic(origin, actor=SYSTEM)
    assert refused.value.code == "mirror_copies_exist"
    topic_services.delete_topic(copy, actor=SYSTEM)  # a copy no link keeps: deletable
    topic_services.delete_topic(origin, actor=SYSTEM)


def test_a_links_copies_in_a_region_stay_on_one_cluster() -> None:
    from tests.controlplane.api_base import make_cluster

    make_cluster("west", "c2")
    tenant = mirror_tenant()
    topic(tenant, name="orders")
    topic(tenant, name="payments")
    made = link(tenant, topics=["orders", "payments"])
    clusters = set(Topic.objects.filter(mirror_link=made).values_list("cluster_id", flat=True))
    assert len(clusters) == 1


def _central_tenant() -> Any:
    from tests.controlplane.api_base import make_cluster
    from tests.controlplane.mirrors.support import region

    make_cluster("central", "c1")
    tenant = mirror_tenant()
    tenant.regions.add(region("central"))
    return tenant


def test_a_copy_is_never_a_source_named_or_matched() -> None:
    """Records travel one hop from their origin region: a copy in the source region is
    refused by name (source_is_copy) and never matched by a pattern."""
    tenant = _central_tenant()
    topic(tenant)
    link(tenant)
    with pytest.raises(InvalidRequest) as refused:
        link(tenant, name="west-central", source_region="west", target_region="central")
    assert refused.value.code == "source_is_copy"
    made = link(tenant, name="west-all", source_region="west", target_region="central",
                topics=[], topic_pattern="*")  # fmt: skip
    assert not Topic.objects.filter(mirror_link=made).exists()
    assert not Topic.objects.filter(cluster__region__name="central").exists()


@pytest.mark.parametrize(
    ("pattern", "names"),
    [("orders-*", {"orders-eu", "orders-us"}), ("orders-?u", {"orders-eu"}),
     ("[op]*", {"orders-eu", "orders-us", "payments"}), ("orders-.*", set())],
)  # fmt: skip
def test_a_pattern_is_a_glob_on_short_names(pattern: str, names: set[str]) -> None:
    tenant = mirror_tenant()
    for name in ("orders-eu", "orders-us", "payments"):
        topic(tenant, name=name)
    made = link(tenant, topics=[], topic_pattern=pattern)
    assert set(Topic.objects.filter(mirror_link=made).values_list("name", flat=True)) == names


def test_a_pattern_that_would_backtrack_as_a_regex_matches_at_once() -> None:
    """``(a+)+$`` against a long name hangs a regex engine; as a glob it is literal."""
    tenant = mirror_tenant()
    topic(tenant, name="a" * 60 + "b")
    made = link(tenant, topics=[], topic_pattern="(a+)+$")
    assert not Topic.objects.filter(mirror_link=made).exists()
    with pytest.raises(InvalidRequest) as refused:
        link(tenant, name="long", topics=[], topic_pattern="a" * 201)
    assert refused.value.code == "invalid_pattern"


def test_copies_carry_their_origins_acl_entries() -> None:
    from controlplane.accounts.models import ServiceAccount
    from controlplane.topics import acls
    from controlplane.topics.models import TopicAcl

    tenant = mirror_tenant()
    origin = topic(tenant)
    ServiceAccount.objects.create(tenant=tenant, name="app", client_id="acme--app")
    granted = acls.grant_topic_acl(origin, principal="acme--app", operations=["consume"],
                                   actor=SYSTEM)  # fmt: skip
    link(tenant)
    copy = copy_of("acme.orders")

    def entries() -> dict[str, list[str]]:
        return dict(TopicAcl.objects.filter(topic=copy).values_list("principal", "operations"))

    assert entries() == {"acme--app": ["consume"]}
    acls.update_topic_acl(granted, operations=["produce", "consume"], actor=SYSTEM)
    assert entries() == {"acme--app": ["produce", "consume"]}
    TopicAcl.objects.create(topic=copy, principal="someone", operations=["consume"])
    services.follow_origins()
    assert entries() == {"acme--app": ["produce", "consume"]}
    acls.revoke_topic_acl(TopicAcl.objects.get(topic=origin), actor=SYSTEM)
    assert entries() == {}
