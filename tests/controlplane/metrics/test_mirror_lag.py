"""Mirror lag history: each collection writes, per mirror link and leg, the lag its
worker last reported (records summed over the leg's partitions, seconds the largest),
read back per leg for the tenant's readers; a caught-up leg answers 0, another tenant's
link or one never seen is missing; the collector reads the lag from the rows the
controllers keep, and prune keeps the series of a leg it still sees."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.core.actors import Actor
from controlplane.core.errors import NotFound
from controlplane.metrics import services
from controlplane.metrics.collect import MirrorLag, Observation
from controlplane.metrics.models import Series
from controlplane.metrics.tiers import FINE
from controlplane.mirrors.models import MirrorLink, MirrorPartition
from controlplane.regions.models import Region
from tests.support.controlplane import make_tenant

pytestmark = pytest.mark.django_db

VIEWER = Actor(subject="u1", name="ada", roles={"acme": "viewer"})
LINK = "acme.orders-west"


def _observe(lags: dict[tuple[str, str], MirrorLag], ticks: int = 3) -> None:
    start = FINE.point_start(timezone.now() - timedelta(minutes=5))
    for tick in range(ticks):
        at = start + timedelta(seconds=10 * tick)
        services.record_observation(Observation(mirrors=lags), at)


def test_each_leg_answers_its_lag() -> None:
    make_tenant("acme", region=Region.objects.create(name="east"))
    _observe({(LINK, "east>west"): MirrorLag(120, 2.5), (LINK, "west>east"): MirrorLag(0, 0.0)})
    body = services.mirror_metrics(VIEWER, "acme", "orders-west", None, None, None)
    legs = {(leg["from_region"], leg["to_region"]): leg["points"] for leg in body["legs"]}
    assert set(legs) == {("east", "west"), ("west", "east")}
    behind = [p for p in legs[("east", "west")] if p["lag_records"]]
    assert [(p["lag_records"], p["lag_s"]) for p in behind] == [(120, 2.5)] * 3
    caught_up = {p["lag_records"] for p in legs[("west", "east")] if p["lag_records"] is not None}
    assert caught_up == {0}


def test_another_tenants_link_or_one_never_seen_is_missing() -> None:
    make_tenant("acme", region=Region.objects.create(name="east"))
    make_tenant("other")
    _observe({("other.theirs", "east>west"): MirrorLag(5, 1.0)})
    with pytest.raises(NotFound):
        services.mirror_metrics(VIEWER, "other", "theirs", None, None, None)
    with pytest.raises(NotFound):
        services.mirror_metrics(VIEWER, "acme", "orders-west", None, None, None)


def test_the_collector_reads_each_legs_lag_from_the_workers_reports() -> None:
    east, west = Region.objects.create(name="east"), Region.objects.create(name="west")
    acme = make_tenant("acme", region=east)
    link = MirrorLink.objects.create(
        tenant=acme, name="orders-west", source_region=east, target_region=west,
        direction="two-way", topics=["orders"],
    )  # fmt: skip
    for partition, (lag, seconds) in enumerate([(10, 1.5), (30, 4.0)]):
        MirrorPartition.objects.create(
            link=link, from_region=east, to_region=west, source_topic="acme.orders",
            target_topic="acme.orders", partition=partition, lag_records=lag,
            lag_seconds=seconds,
        )  # fmt: skip
    MirrorPartition.objects.create(
        link=link, from_region=west, to_region=east, source_topic="acme.orders",
        target_topic="acme.orders", partition=0,
    )  # fmt: skip
    assert services.mirror_lags() == {
        (LINK, "east>west"): MirrorLag(40, 4.0),
        (LINK, "west>east"): MirrorLag(0, 0.0),
    }


def test_prune_keeps_the_series_of_a_leg_still_seen() -> None:
    make_tenant("acme", region=Region.objects.create(name="east"))
    _observe({(LINK, "east>west"): MirrorLag(0, 0.0)}, ticks=1)  # idle: a series, no block
    Series.objects.update(created_at=timezone.now() - timedelta(hours=2))
    services.prune_metrics()
    assert Series.objects.filter(kind="mirror", group=LINK, topic="east>west").exists()
