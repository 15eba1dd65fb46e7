"""Usage is counted by the apps that own what is counted: the topics app's meter is
installed when Django starts, and every registered meter counts against the quota."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import pytest

from controlplane.core.actors import Actor
from controlplane.core.errors import QuotaExceeded
from controlplane.quotas import usage
from controlplane.quotas.models import Quota
from controlplane.quotas.services import check_topic_quota, quota_usage
from controlplane.tenants.models import Tenant
from controlplane.topics.services import create_topic
from controlplane.topics.usage import TopicUsage
from tests.controlplane.api_base import make_cluster, make_tenant

SYSTEM = Actor.system("tests")


class HeldElsewhere:
    """A meter of another app (as lanes will be): one topic and 100 stored bytes each."""

    def reserved(self, tenant: Tenant) -> Mapping[str, int]:
        return {"topics": 1, "partitions": 0, "storage_bytes": 0}

    def stored_bytes(self, tenant_ids: Collection[int]) -> Mapping[int, int]:
        return dict.fromkeys(tenant_ids, 100)


@pytest.fixture
def acme(db: None) -> Any:
    make_cluster("local")
    return make_tenant("acme")


def test_the_topics_app_installs_its_meter() -> None:
    assert isinstance(usage._meters["topics"], TopicUsage)


def test_every_meter_counts_against_the_quota(
    acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_topic(acme, name="orders", partitions=1, actor=SYSTEM)
    Quota.objects.filter(tenant=acme).update(max_topics=2)
    check_topic_quota(acme, topics=1)  # one topic held, room for one more
    monkeypatch.setitem(usage._meters, "elsewhere", HeldElsewhere())
    assert quota_usage(acme)["topics"] == 2
    assert quota_usage(acme)["stored_bytes"] == 100
    with pytest.raises(QuotaExceeded):
        check_topic_quota(acme, topics=1)
