"""Group failover's refusals that need no broker: a leg without progress is never
guessed at (the brokers' reads are stubbed; the translation itself is tested end to end
in tests/integration/mirror)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.mirrors import failover
from controlplane.mirrors.failover import MirrorProgressUnknown
from controlplane.mirrors.models import MirrorLink, MirrorPartition
from dataplane.client import TopicPartition
from dataplane.client.coordinator import GroupDescription
from tests.controlplane.mirrors.support import link, mirror_tenant, region, topic, two_regions

pytestmark = pytest.mark.django_db
TP = TopicPartition("acme.orders", 0)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> MirrorLink:
    two_regions()
    tenant = mirror_tenant()
    topic(tenant)
    monkeypatch.setattr(failover, "_bounds", lambda addresses, tp: (0, 0))
    monkeypatch.setattr(failover, "tail_reader", lambda addresses, topics: _nothing)
    return link(tenant, direction="two-way")


def _nothing(topic: str, partition: int, start: int) -> Iterator[Any]:
    return iter(())


def _side(name: str) -> Any:
    return failover._Side(name, [], GroupDescription("acme.g", "Empty"))


def test_a_leg_without_progress_is_409_never_offset_0(made: MirrorLink) -> None:
    with pytest.raises(MirrorProgressUnknown) as refused:
        failover._first_unconsumed_local(made, _side("west"), "east", TP, committed=7)
    assert (refused.value.code, refused.value.details["from_region"]) == (
        "mirror_progress_unknown", "east",
    )  # fmt: skip
    with pytest.raises(MirrorProgressUnknown):
        failover._first_copy_from(made, "east", TP, 7, _nothing, (0, 0))


def test_a_leg_with_progress_answers_where_it_copies_next(made: MirrorLink) -> None:
    MirrorPartition.objects.create(link=made, from_region=region("east"),
                                   to_region=region("west"), source_topic="acme.orders",
                                   target_topic="acme.orders", partition=0,
                                   next_source_offset=12)  # fmt: skip
    assert failover._first_unconsumed_local(made, _side("west"), "east", TP, committed=7) == 12
    assert failover._first_copy_from(made, "east", TP, 7, _nothing, (0, 3)) == (3, 0)
