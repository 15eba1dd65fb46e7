"""``meridian mirrors`` and ``meridian groups failover`` against a real control plane
(pytest-django's live server), as ``meridian lanes`` and ``meridian exports`` are tested:
tables and ``--json``, the API's refusals printed with their codes and field messages and
exit code 1, another tenant's link answering like a missing one. The worker progress the
controllers would store is written as rows; the failover's broker side is stood in for at
its one seam (``controlplane.mirrors.failover.failover_group``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from rich.console import Console

from controlplane.accounts.identity import LocalIdentity
from controlplane.core.actors import Actor
from controlplane.mirrors import failover
from controlplane.mirrors import services as mirror_services
from controlplane.mirrors.models import MirrorLink, MirrorPartition
from controlplane.regions.models import Region
from controlplane.tenants.models import Tenant
from controlplane.topics import services as topic_services
from dataplane.cli.base import table
from tests.controlplane.api_base import make_cluster
from tests.controlplane.conftest import local_identity, token_for
from tests.dataplane.cli.test_lanes import Meridian
from tests.support.controlplane import make_tenant

__all__ = ["local_identity"]

SYSTEM = Actor.system("tests")


@pytest.fixture
def acme(transactional_db: None) -> Tenant:
    """Tenants acme (allowed east and west) and globex (east only), each with
    topics ``orders`` and ``payments`` in east."""
    east = make_cluster("east").region
    make_cluster("west")
    globex = make_tenant("globex", region=east)
    tenant = make_tenant("acme", region=east)
    tenant.regions.set(Region.objects.filter(name="west"))
    for owner in (tenant, globex):
        topic_services.create_topic(owner, name="orders", partitions=2, actor=SYSTEM)
        topic_services.create_topic(owner, name="payments", partitions=1, actor=SYSTEM)
    return tenant


@pytest.fixture
def meridian(live_server: Any, local_identity: LocalIdentity, acme: Tenant) -> Any:
    def as_role(role: str = "developer") -> Meridian:
        return Meridian(live_server.url, token_for(local_identity, roles={"acme": role}))

    return as_role


def _progress(link: MirrorLink, partition: int, next_offset: int, end: int) -> None:
    """What a worker of the link's forward leg reported of ``acme.orders/partition``."""
    MirrorPartition.objects.create(
        link=link, from_region=link.source_region, to_region=link.target_region,
        source_topic="acme.orders", target_topic="acme.orders", partition=partition,
        state="copying", next_source_offset=next_offset, source_end_offset=end,
        lag_records=end - next_offset, lag_seconds=1.5 if end > next_offset else 0.0,
        copied_records=next_offset,
    )  # fmt: skip


def test_create_list_describe_pause_resume_delete(meridian: Any, acme: Tenant) -> None:
    cli = meridian("developer")
    created = cli.ok(
        "mirrors", "create", "orders-west", "--from", "east", "--to", "west",
        "--topic", "orders", "--direction", "two-way",
    )  # fmt: skip
    assert created.stdout.split()[:5] == ["created", "mirror", "orders-west:", "orders", "east"]
    assert "<->" in created.stdout
    link = MirrorLink.objects.get(tenant=acme, name="orders-west")
    assert (link.direction, link.topics, link.start_position) == ("two-way", ["orders"], "earliest")
    _progress(link, 0, 90, 100)
    _progress(link, 1, 50, 50)

    listed = cli.ok("mirrors", "list").stdout.splitlines()
    assert listed[0].split()[:4] == ["mirror", "tenant", "regions", "topics"]
    row = listed[1].split()
    assert row[:6] == ["orders-west", "acme", "east", "<->", "west", "orders"], listed

    described = cli.ok("mirrors", "describe", "orders-west").stdout
    assert "lag per partition" in described
    lag_rows = [line.split() for line in described.splitlines() if "acme.orders" in line]
    assert [r[:7] for r in lag_rows] == [
        ["east", "west", "acme.orders", "0", "90", "100", "10"],
        ["east", "west", "acme.orders", "1", "50", "50", "0"],
    ], described
    as_json = json.loads(cli.ok("mirrors", "describe", "orders-west", "--json").stdout)
    assert as_json["lag_records"] == 10
    assert len(as_json["partitions"]) == 2

    assert cli.ok("mirrors", "pause", "orders-west").stdout.strip() == "paused mirror orders-west"
    link.refresh_from_db()
    assert (link.paused, link.health) == (True, "paused")
    assert "paused" in cli.ok("mirrors", "describe", "orders-west").stdout
    assert cli.ok("mirrors", "resume", "orders-west").stdout.strip() == "resumed mirror orders-west"
    link.refresh_from_db()
    assert link.paused is False

    assert "deleting mirror orders-west" in cli.ok("mirrors", "delete", "orders-west").stdout
    link.refresh_from_db()
    assert link.status == "deleting"


def test_a_pattern_a_start_time_and_json(meridian: Any, acme: Tenant) -> None:
    cli = meridian("developer")
    created = json.loads(cli.ok(
        "mirrors", "create", "pay", "--from", "east", "--to", "west", "--pattern", "pay*",
        "--start", "timestamp", "--start-timestamp-ms", "1700000000000", "--paused", "--json",
    ).stdout)  # fmt: skip
    assert (created["topic_pattern"], created["start_timestamp_ms"]) == ("pay*", 1700000000000)
    assert (created["paused"], created["health"]) == (True, "paused")
    listed = json.loads(cli.ok("mirrors", "list", "--json").stdout)
    assert [m["name"] for m in listed] == ["pay"]


def test_refusals_are_printed_with_their_codes(meridian: Any, acme: Tenant) -> None:
    cli = meridian("developer")
    same = cli.refused("mirrors", "create", "link-one", "--from", "east", "--to", "east",
                       "--topic", "orders")  # fmt: skip
    assert same[0].startswith("error: same_region:"), same
    elsewhere = cli.refused("mirrors", "create", "link-one", "--from", "east", "--to", "north",
                            "--topic", "orders")  # fmt: skip
    assert "error:" in elsewhere[0], elsewhere
    missing = cli.refused("mirrors", "create", "link-one", "--from", "east", "--to", "west",
                          "--topic", "nope")  # fmt: skip
    assert missing[0].startswith("error: topic_not_found:"), missing
    both = cli.refused("mirrors", "create", "link-one", "--from", "east", "--to", "west",
                       "--topic", "orders", "--pattern", "o.*")  # fmt: skip
    assert "not both" in both[0], both
    assert not MirrorLink.objects.exists()
    viewer = meridian("viewer").refused("mirrors", "create", "link-one", "--from", "east", "--to",
                                        "west", "--topic", "orders")  # fmt: skip
    assert viewer[0].startswith("error: "), viewer


def test_another_tenants_link_answers_like_a_missing_one(meridian: Any, acme: Tenant) -> None:
    globex = Tenant.objects.get(slug="globex")
    globex.regions.set(Region.objects.filter(name="west"))
    mirror_services.create_link(
        globex, name="theirs", source_region="east", target_region="west",
        topics=["orders"], actor=SYSTEM,
    )  # fmt: skip
    cli = meridian("developer")
    for command in (["describe"], ["pause"], ["resume"], ["delete"]):
        refused = cli.refused("mirrors", *command, "theirs")
        assert refused[0].startswith("error: not_found:"), refused
    assert cli.ok("mirrors", "list").stdout.count("theirs") == 0


@dataclass(frozen=True)
class Moved:
    """The failover service's answer, as the API serializes it."""

    group: str
    from_region: str
    to_region: str
    partitions: list[failover.PartitionFailover]


def test_groups_failover_prints_each_partitions_move(
    meridian: Any, acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror_services.create_link(
        acme, name="orders-west", source_region="east", target_region="west",
        topics=["orders"], direction="two-way", actor=SYSTEM,
    )  # fmt: skip
    asked: list[tuple[str, str]] = []

    def translated(link: MirrorLink, group: str, to_region: str, *args: Any, **kw: Any) -> Any:
        asked.append((group, to_region))
        moves = [
            failover.PartitionFailover("acme.orders", 0, 120, 131, True, 0),
            failover.PartitionFailover("acme.orders", 1, 40, 38, False, 2),
        ]
        return Moved(group, "east", to_region, moves)

    monkeypatch.setattr(failover, "failover_group", translated)
    cli = meridian("developer")
    out = cli.ok("groups", "failover", "acme.billing", "--mirror", "orders-west", "--to", "west")
    assert asked == [("acme.billing", "west")]
    lines = out.stdout.splitlines()
    assert lines[0] == "group acme.billing moved to west"
    rows = [line.split() for line in lines if line.startswith("acme.orders")]
    assert rows == [
        ["acme.orders", "0", "120", "131", "yes", "0"],
        ["acme.orders", "1", "40", "38", "no", "2"],
    ], out.stdout
    as_json = json.loads(cli.ok(
        "groups", "failover", "acme.billing", "--mirror", "orders-west", "--to", "west", "--json"
    ).stdout)  # fmt: skip
    assert as_json["partitions"][1]["may_repeat"] == 2
    missing = cli.refused("groups", "failover", "acme.billing", "--mirror", "nope", "--to", "west")
    assert missing[0].startswith("error: not_found:"), missing


def test_patterns_and_reasons_print_as_they_are(meridian: Any, acme: Tenant) -> None:
    """Text from users and servers is never read as Rich markup: a pattern with brackets,
    a reason with ``[/]`` or ``[bold]`` print exactly, in the list and in describe."""
    link = mirror_services.create_link(
        acme, name="brackets", source_region="east", target_region="west",
        topics=["orders"], actor=SYSTEM,
    )  # fmt: skip
    MirrorLink.objects.filter(pk=link.pk).update(
        topics=[], topic_pattern="[a-z]+x[/]", status_reason="[bold]no[/bold] x[/]",
        health_reason="worker [red]:x: unreadable",
    )  # fmt: skip
    cli = meridian("developer")
    listed = cli.ok("mirrors", "list").stdout
    assert "matching [a-z]+x[/]" in listed, listed
    described = cli.ok("mirrors", "describe", "brackets").stdout
    assert "matching [a-z]+x[/]" in described, described
    assert "[bold]no[/bold] x[/]" in described, described
    assert "worker [red]:x: unreadable" in described, described


def test_every_groups_tables_print_names_and_reasons_as_they_are() -> None:
    """Every table of the CLI (topics, exports, indexes, lanes, mirrors share it) shows its
    title and cells literally, whatever console prints it."""
    out = Console(width=200, record=True, markup=True, emoji=True)
    out.print(table("lane [b]x[/b]", ["name", "reason"], [["a[/]", "[red]:x: down"]]))
    text = out.export_text()
    for shown in ("lane [b]x[/b]", "a[/]", "[red]:x: down"):
        assert shown in text, text
