"""Stored history on the real Postgres: rates from counter deltas, idle series, the
roll-up of 10 s points into 1 min points, retention, and the REST reads (tenant scoping,
typed 400s)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.metrics import history, services
from controlplane.metrics.collect import GroupCounters, Observation, TopicCounters
from controlplane.metrics.models import Block, Collection, Series
from controlplane.metrics.store import MEASURES
from controlplane.metrics.tiers import COARSE, FINE
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from tests.controlplane.conftest import ClientFactory
from tests.support.controlplane import make_tenant, register_static_cluster

pytestmark = pytest.mark.django_db


def _minute(ago: timedelta) -> datetime:
    """A minute boundary ``ago`` before now."""
    return COARSE.point_start(timezone.now() - ago)


def _observe(at: datetime, end_offset: int, size: int, committed: int = 0, lag: int = 0) -> None:
    observation = Observation(
        topics={"acme.orders": TopicCounters(end_offset, size)},
        groups={("acme.billing", "acme.orders"): GroupCounters({0: committed}, lag)},
    )
    services.record_observation(observation, at)


def _fine_value(series: Series, at: datetime, measure: str) -> float | None:
    block = Block.objects.get(
        series=series, resolution_s=FINE.resolution_s, start=FINE.block_start(at)
    )
    value: float | None = getattr(block, measure)[FINE.slot(at) - 1]
    return value


@pytest.fixture(autouse=True)
def topics() -> None:
    """Tenants acme and other, each with its topic ``orders`` (series belong to the
    tenant holding their names' slug: without one, nothing is stored)."""
    cluster = register_static_cluster([])
    for slug in ("acme", "other"):
        tenant = make_tenant(slug, region=cluster.region)
        Topic.objects.create(
            tenant=tenant,
            cluster=cluster,
            name="orders",
            full_name=f"{slug}.orders",
            partitions=1,
            retention_ms=3_600_000,
            retention_bytes=-1,
        )


def test_rates_are_counter_deltas_over_the_time_between_reads() -> None:
    start = _minute(timedelta(minutes=5))
    _observe(start, end_offset=100, size=1_000, committed=50, lag=50)
    _observe(start + timedelta(seconds=10), end_offset=300, size=5_000, committed=150, lag=150)

    at = start + timedelta(seconds=10)
    topic = Series.objects.get(kind="topic", topic="acme.orders")
    group = Series.objects.get(kind="group", group="acme.billing", topic="acme.orders")
    assert _fine_value(topic, at, "records_per_s") == 20.0
    assert _fine_value(topic, at, "bytes_per_s") == 400.0
    assert _fine_value(group, at, "records_per_s") == 10.0
    assert _fine_value(group, at, "lag_records") == 150.0
    assert _fine_value(group, at, "lag_s") is None  # brokers do not report lag in time yet
    assert (topic.tenant.slug, group.tenant.slug) == ("acme", "acme")


def test_a_first_commit_far_from_zero_is_not_consumption() -> None:
    """A consumer that starts at the end commits a partition at a large offset once; only
    partitions committed in both readings count, each by its own forward move."""
    start = _minute(timedelta(minutes=5))
    observe = services.record_observation
    pair = ("acme.billing", "acme.orders")
    observe(Observation(groups={pair: GroupCounters({0: 100}, 0)}), start)
    later = start + timedelta(seconds=10)
    observe(Observation(groups={pair: GroupCounters({0: 150, 1: 5_000_000}, 0)}), later)
    group = Series.objects.get(kind="group", group="acme.billing", topic="acme.orders")
    assert _fine_value(group, later, "records_per_s") == 5.0


def test_an_idle_series_stores_no_point() -> None:
    start = _minute(timedelta(minutes=5))
    _observe(start, end_offset=100, size=1_000, committed=100)
    _observe(start + timedelta(seconds=10), end_offset=100, size=1_000, committed=100)

    assert Collection.objects.get(at=start + timedelta(seconds=10)).points_written == 0
    assert not Block.objects.exists()


def test_a_minute_of_10s_points_rolls_into_one_1min_point() -> None:
    minute = _minute(timedelta(minutes=10))
    _observe(minute - timedelta(seconds=10), end_offset=0, size=0)
    for tick in range(6):
        # 60 records per tick (6/s), but the third tick is idle; lag peaks at tick 4.
        produced = 60 * (tick + 1) - (60 if tick >= 2 else 0)
        lag = 40 if tick == 4 else 10
        _observe(minute + timedelta(seconds=10 * tick), produced, produced * 10, 0, lag)

    assert services.roll_up_metrics(minute + timedelta(seconds=90)) >= 1

    coarse = Block.objects.get(
        series__kind="topic", resolution_s=COARSE.resolution_s, start=COARSE.block_start(minute)
    )
    slot = COARSE.slot(minute) - 1
    assert coarse.records_per_s[slot] == pytest.approx(5.0)  # 5 ticks of 6/s and one of 0
    assert coarse.bytes_per_s[slot] == pytest.approx(50.0)
    lagging = Block.objects.get(series__kind="group", resolution_s=COARSE.resolution_s)
    assert lagging.lag_records[slot] == 40.0
    assert sum(v is not None for v in coarse.records_per_s) == 1  # one minute, one point


def test_a_roll_up_runs_each_minute_once() -> None:
    minute = _minute(timedelta(minutes=10))
    _observe(minute, 0, 0)
    _observe(minute + timedelta(seconds=10), 100, 100)
    services.roll_up_metrics(minute + timedelta(seconds=90))
    assert services.roll_up_metrics(minute + timedelta(seconds=95)) == 0


def test_retention_deletes_blocks_past_their_tier() -> None:
    now = timezone.now()
    acme = Tenant.objects.get(slug="acme")
    series = Series.objects.create(kind="topic", tenant=acme, topic="acme.orders")
    ages = {
        (FINE, timedelta(minutes=90)): False,
        (FINE, timedelta(minutes=5)): True,
        (COARSE, timedelta(days=8)): False,
        (COARSE, timedelta(days=6)): True,
    }
    for tier, age in ages:
        Block.objects.create(
            series=series,
            resolution_s=tier.resolution_s,
            start=tier.block_start(now - age),
            **{m: [None] * tier.slots for m in MEASURES},
        )
    Collection.objects.create(at=now - timedelta(days=8))

    deleted = services.prune_metrics(now)

    assert deleted["blocks_10s"] == 1
    assert deleted["blocks_60s"] == 1
    assert deleted["collections"] == 1
    kept = {(b.resolution_s, b.start) for b in Block.objects.all()}
    expected = {(t.resolution_s, t.block_start(now - age)) for (t, age), k in ages.items() if k}
    assert kept == expected


def _viewer(client_for: ClientFactory) -> APIClient:
    return client_for(roles={"acme": "viewer"})


def test_a_topic_answers_its_rates_at_10s_for_the_last_hour(
    topics: None, client_for: ClientFactory
) -> None:
    start = _minute(timedelta(minutes=5))
    _observe(start, 0, 0)
    _observe(start + timedelta(seconds=10), 100, 1000)
    _observe(start + timedelta(seconds=20), 100, 1000)  # idle: 0, not null

    response = _viewer(client_for).get(
        "/api/v1/topics/acme.orders/metrics",
        {"from": start.isoformat(), "to": (start + timedelta(seconds=40)).isoformat()},
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["topic"], body["resolution"], body["step"]) == ("acme.orders", 10, 10)
    rates = [p["records_per_s"] for p in body["points"]]
    assert rates == [0.0, 10.0, 0.0, None]  # the last instant was never measured


def test_a_group_answers_consume_rate_and_lag_per_topic(
    topics: None, client_for: ClientFactory
) -> None:
    start = _minute(timedelta(minutes=5))
    _observe(start, 0, 0, committed=0, lag=20)
    _observe(start + timedelta(seconds=10), 0, 0, committed=50, lag=30)

    response = _viewer(client_for).get(
        "/api/v1/groups/acme.billing/metrics",
        {"from": start.isoformat(), "to": (start + timedelta(seconds=20)).isoformat()},
    )

    assert response.status_code == 200, response.content
    [topic] = response.json()["topics"]
    assert topic["topic"] == "acme.orders"
    assert [(p["records_per_s"], p["lag_records"], p["lag_s"]) for p in topic["points"]] == [
        (0.0, 20.0, None),
        (5.0, 30.0, None),
    ]


def test_an_idle_group_is_known_and_answers_zeros(topics: None, client_for: ClientFactory) -> None:
    start = _minute(timedelta(minutes=5))
    _observe(start, 0, 0, committed=10, lag=0)

    response = _viewer(client_for).get(
        "/api/v1/groups/acme.billing/metrics",
        {"from": start.isoformat(), "to": (start + timedelta(seconds=10)).isoformat()},
    )

    assert response.status_code == 200, response.content
    [topic] = response.json()["topics"]
    assert [(p["records_per_s"], p["lag_records"]) for p in topic["points"]] == [(0.0, 0.0)]
    services.prune_metrics(timezone.now() + timedelta(hours=2))
    assert Series.objects.filter(group="acme.billing").exists()  # still seen: kept


def test_another_tenants_topic_or_group_is_a_404_like_a_missing_one(
    topics: None, client_for: ClientFactory
) -> None:
    services.record_observation(
        Observation(groups={("other.billing", "other.orders"): GroupCounters({0: 0}, 5)}),
        timezone.now(),
    )
    viewer = _viewer(client_for)
    for path in (
        "/api/v1/topics/other.orders/metrics",
        "/api/v1/topics/acme.missing/metrics",
        "/api/v1/groups/other.billing/metrics",
        "/api/v1/groups/acme.missing/metrics",
    ):
        response = viewer.get(path)
        assert response.status_code == 404, (path, response.content)
        assert response.json()["error"]["code"] == "not_found"
    default = viewer.get("/api/v1/topics/acme.orders/metrics", {"step": 30})
    assert default.status_code == 200, default.content
    assert default.json()["resolution"] == 10  # the default range is the last hour


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}, "invalid_range"),
        ({"step": 15}, "invalid_step"),
        ({"from": "2026-01-01T00:00:00Z", "to": "2026-01-09T00:00:00Z"}, "range_too_long"),
        (
            {"step": 10, "from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"},
            "invalid_step",
        ),
        ({"from": "yesterday"}, "invalid"),
    ],
)
def test_bad_parameters_are_typed_400s(
    topics: None, client_for: ClientFactory, params: dict[str, object], code: str
) -> None:
    response = _viewer(client_for).get("/api/v1/topics/acme.orders/metrics", params)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code


def test_a_range_older_than_an_hour_answers_1min_points(
    topics: None, client_for: ClientFactory
) -> None:
    since = _minute(timedelta(hours=3))
    response = _viewer(client_for).get(
        "/api/v1/topics/acme.orders/metrics",
        {"from": since.isoformat(), "to": (since + timedelta(hours=1)).isoformat(), "step": 300},
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["resolution"], body["step"], len(body["points"])) == (60, 300, 12)


@pytest.mark.parametrize(
    ("params", "fields"),
    [
        ({"from": "9999-12-31T23:00:00Z", "to": "9999-12-31T23:59:59Z"}, {"from", "to"}),
        ({"to": "9999-12-31T23:59:59Z"}, {"to"}),
        ({"to": "0001-01-01T00:30:00Z"}, {"to"}),
        ({"from": "0001-01-01T00:00:00Z", "to": "0001-01-01T00:30:00Z"}, {"from", "to"}),
        ({"from": "1969-12-31T23:00:00Z", "to": "1970-01-01T00:00:00Z"}, {"from"}),
        ({"step": 10**18}, {"step"}),
    ],
)
def test_extreme_instants_and_steps_are_400s_naming_the_field(
    client_for: ClientFactory, params: dict[str, object], fields: set[str]
) -> None:
    """Years like 9999 or 1, or a step of 10^18 s, are refused by field (not an overflow
    further on), on a topic and a group that both have history."""
    start = _minute(timedelta(minutes=5))
    _observe(start, 0, 0, committed=0, lag=20)
    _observe(start + timedelta(seconds=10), 100, 1000, committed=50, lag=30)
    viewer = _viewer(client_for)
    for path in ("/api/v1/topics/acme.orders/metrics", "/api/v1/groups/acme.billing/metrics"):
        response = viewer.get(path, params)
        assert response.status_code == 400, (path, response.content)
        error = response.json()["error"]
        assert error["code"] == "invalid"
        assert set(error["details"]) == fields, error
        assert "between 1970-01-01T00:00:00Z and 9999-01-01T00:00:00Z" in error["message"] or (
            fields == {"step"}
        )
    bounded = viewer.get(
        "/api/v1/topics/acme.orders/metrics",
        {"from": "9998-12-31T23:00:00Z", "to": "9999-01-01T00:00:00Z"},
    )
    assert bounded.status_code == 200, bounded.content  # the last hour allowed: no points
    assert not any(p["records_per_s"] for p in bounded.json()["points"])


def test_the_service_refuses_extreme_instants_too() -> None:
    """Callers other than the API (the console) get the same typed error."""
    with pytest.raises(history.InvalidRange):
        history.plan(datetime(9999, 12, 31, tzinfo=UTC), None, None, timezone.now())
    with pytest.raises(history.InvalidStep):
        history.plan(None, None, 10**18, timezone.now())
