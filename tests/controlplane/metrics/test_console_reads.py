"""The reads the console charts beyond the REST API's, on the real Postgres: a topic's
consume rate (the sum over the groups reading it) and a tenant's busiest topics (ranked
by records produced, limited, another tenant's never in; a tenant the actor has no role
in is missing)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.core.actors import Actor
from controlplane.core.errors import NotFound
from controlplane.metrics import services
from controlplane.metrics.collect import GroupCounters, Observation, TopicCounters
from controlplane.metrics.tiers import FINE
from controlplane.topics.models import Topic
from tests.support.controlplane import make_tenant, register_static_cluster

pytestmark = pytest.mark.django_db

VIEWER = Actor(subject="u1", name="ada", roles={"acme": "viewer"})
TOPICS = ("acme.orders", "acme.clicks", "acme.audit", "acme.idle", "other.orders")


@pytest.fixture(autouse=True)
def history() -> None:
    """Three ticks, 10 s apart: per tick acme.clicks gets 300 records, acme.orders 100,
    acme.audit 10, other.orders 1,000; acme.orders is read by two groups (20 and 30
    records a tick)."""
    cluster = register_static_cluster([])
    for slug in ("acme", "other"):
        tenant = make_tenant(slug, region=cluster.region)
        for name in (t for t in TOPICS if t.startswith(slug + ".")):
            Topic.objects.create(
                tenant=tenant, cluster=cluster, name=name.split(".", 1)[1], full_name=name,
                partitions=1, retention_ms=3_600_000, retention_bytes=-1,
            )  # fmt: skip
    per_tick = {"acme.clicks": 300, "acme.orders": 100, "acme.audit": 10, "other.orders": 1000}
    start = FINE.point_start(timezone.now() - timedelta(minutes=5))
    for tick in range(3):
        observation = Observation(
            topics={n: TopicCounters(r * tick, r * tick) for n, r in per_tick.items()},
            groups={
                ("acme.billing", "acme.orders"): GroupCounters({0: 20 * tick}, 0),
                ("acme.search", "acme.orders"): GroupCounters({0: 30 * tick}, 0),
            },
        )
        services.record_observation(observation, start + timedelta(seconds=10 * tick))


def test_a_topics_consume_rate_sums_its_groups() -> None:
    body = services.topic_consume_metrics(VIEWER, "acme.orders", None, None, None)
    rates = [p["records_per_s"] for p in body["points"] if p["records_per_s"]]
    assert rates == [pytest.approx(5.0), pytest.approx(5.0)]  # (20 + 30) / 10 s, twice


def test_a_topic_nobody_reads_consumes_nothing() -> None:
    body = services.topic_consume_metrics(VIEWER, "acme.clicks", None, None, None)
    assert not any(p["records_per_s"] for p in body["points"])


def test_another_tenants_topic_is_missing() -> None:
    with pytest.raises(NotFound):
        services.topic_consume_metrics(VIEWER, "other.orders", None, None, None)


def test_the_busiest_topics_are_ranked_and_limited() -> None:
    body = services.busiest_topics(VIEWER, "acme", None, None, None, limit=2)
    assert [t["topic"] for t in body["topics"]] == ["acme.clicks", "acme.orders"]
    orders = body["topics"][1]
    assert max(p["records_per_s"] or 0 for p in orders["produce"]) == pytest.approx(10.0)
    assert max(p["records_per_s"] or 0 for p in orders["consume"]) == pytest.approx(5.0)
    everything = services.busiest_topics(VIEWER, "acme", None, None, None, limit=10)
    # Never produced to: left out. Another tenant's: never in.
    assert [t["topic"] for t in everything["topics"]] == [
        "acme.clicks", "acme.orders", "acme.audit",
    ]  # fmt: skip


def test_a_tenant_without_a_role_is_missing() -> None:
    with pytest.raises(NotFound):
        services.busiest_topics(VIEWER, "other", None, None, None, limit=5)
