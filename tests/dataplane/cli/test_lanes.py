"""``meridian lanes`` against a real control plane: pytest-django's live server (the
control plane's WSGI app on a port, in a thread), a bearer token of the local issuer,
the CLI invoked in-process with ``--api`` and ``--token``. Tables and ``--json``, the
API's refusals printed with its field messages and exit code 1, roles, another tenant's
lane answering like a missing one, and an API that cannot be reached."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from controlplane.accounts.identity import LocalIdentity
from controlplane.core.actors import Actor
from controlplane.lanes import services as lane_services
from controlplane.lanes.models import Lane
from controlplane.tenants.models import Tenant
from controlplane.topics import services as topic_services
from dataplane.cli import app
from lanes.names import LANE_NAME_RULE
from tests.controlplane.api_base import make_cluster
from tests.controlplane.conftest import local_identity, token_for
from tests.support.brokers import free_ports
from tests.support.controlplane import make_tenant

__all__ = ["local_identity"]

SYSTEM = Actor.system("tests")


class Meridian:
    """``meridian --api <live server> --token <token of roles> ...``."""

    def __init__(self, api: str, token: str | None) -> None:
        self.api = api
        self.token = token

    def __call__(self, *args: str) -> Result:
        auth = ["--token", self.token] if self.token else []
        return CliRunner().invoke(app, ["--api", self.api, *auth, *args])

    def ok(self, *args: str) -> Result:
        result = self(*args)
        assert result.exit_code == 0, f"{args}: {result.exit_code}\n{result.output}"
        return result

    def refused(self, *args: str) -> list[str]:
        """The lines on stderr of a command that must fail with exit code 1."""
        result = self(*args)
        assert result.exit_code == 1, f"{args}: {result.exit_code}\n{result.output}"
        assert "Traceback" not in result.output
        return result.stderr.splitlines()


@pytest.fixture
def acme(transactional_db: None) -> Tenant:
    cluster = make_cluster()
    make_tenant("globex", region=cluster.region)
    tenant = make_tenant("acme", region=cluster.region)
    topic_services.create_topic(tenant, name="orders", partitions=2, actor=SYSTEM)
    topic_services.create_topic(tenant, name="payments", partitions=1, actor=SYSTEM)
    return tenant


@pytest.fixture
def meridian(live_server: Any, local_identity: LocalIdentity, acme: Tenant) -> Any:
    def as_role(role: str | None = "developer", **claims: Any) -> Meridian:
        roles = {"acme": role} if role else {}
        return Meridian(live_server.url, token_for(local_identity, roles=roles, **claims))

    return as_role


def test_create_list_describe_delete(meridian: Any, acme: Tenant) -> None:
    cli = meridian("developer")
    created = cli.ok(
        "lanes", "create", "ppe", "--topic", "orders", "--orphan-policy", "hold",
        "--consume-trunk", "--ttl-s", "7200", "--partitions", "1",
    )  # fmt: skip
    assert created.stdout.strip() == "created lane ppe of tenant acme (acme.orders)"
    cli.ok("lanes", "create", "boe-alice")
    lane = Lane.objects.get(tenant=acme, name="ppe")
    assert (lane.all_topics, lane.consume_trunk, lane.orphan_policy) == (False, True, "hold")
    assert (lane.ttl_s, lane.partitions) == (7200, 1)

    listed = cli.ok("lanes", "list").stdout.splitlines()
    assert listed[0].split()[:3] == ["lane", "tenant", "topics"]
    assert listed[1].split() == ["boe-alice", "acme", "all", "topics", "no", "trunk", "7d", "-"]
    assert listed[2].split() == ["ppe", "acme", "acme.orders", "yes", "hold", "2h", "-"]
    as_json = json.loads(cli.ok("lanes", "list", "--json").stdout)
    assert [(lane["name"], lane["all_topics"]) for lane in as_json] == [
        ("boe-alice", True),
        ("ppe", False),
    ]

    lane_services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
    described = cli.ok("lanes", "describe", "ppe").stdout
    assert "lane ppe" in described
    facts_table, topics_table = described.split("lane topics\n")
    facts = [line.split() for line in facts_table.splitlines()]
    assert ["orphan", "policy", "hold"] in facts
    assert ["topics", "acme.orders"] in facts
    assert [line.split()[:4] for line in topics_table.splitlines()[1:]] == [
        ["acme.orders~ppe", "acme.orders", "1", "pending"]
    ]
    as_json = json.loads(cli.ok("lanes", "describe", "ppe", "--tenant", "acme", "--json").stdout)
    assert [t["name"] for t in as_json["lane_topics"]] == ["acme.orders~ppe"]

    assert cli.ok("lanes", "delete", "ppe").stdout.strip() == "deleted lane ppe"
    assert list(Lane.objects.values_list("name", flat=True)) == ["boe-alice"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["Bad_Name"],
            [f"error: invalid: name: {LANE_NAME_RULE}", f"  name: {LANE_NAME_RULE}"],
        ),
        (
            ["ppe", "--topic", "orders", "--topic", "nosuch"],
            [
                "error: invalid: topics: no topic 'acme.nosuch' in tenant 'acme'",
                "  topics: no topic 'acme.nosuch' in tenant 'acme'",
            ],
        ),
        (["ppe", "--ttl-s", "0"], ["error: invalid: ttl_s: between 1 and 31536000"]),
    ],
)
def test_a_refused_create_prints_the_apis_field_messages(
    meridian: Any, args: list[str], expected: list[str]
) -> None:
    lines = meridian("developer").refused("lanes", "create", *args)
    assert lines[: len(expected)] == expected
    assert not Lane.objects.exists()


def test_a_name_in_use_and_the_quota(meridian: Any, acme: Tenant) -> None:
    cli = meridian("developer")
    cli.ok("lanes", "create", "ppe")
    assert cli.refused("lanes", "create", "ppe")[1:] == ["  name: 'ppe' is in use"]
    acme.quota.max_lanes = 1
    acme.quota.save()
    (line, *_) = cli.refused("lanes", "create", "other")
    assert line.startswith("error: quota_exceeded: ")
    assert "max_lanes" in line


def test_a_lane_with_live_consumers_is_deleted_only_with_force(meridian: Any, acme: Tenant) -> None:
    lane = lane_services.create_lane(acme, name="ppe", actor=SYSTEM)
    Lane.objects.filter(pk=lane.pk).update(live_topics=["acme.orders"])
    cli = meridian("developer")
    line, details = cli.refused("lanes", "delete", "ppe")
    assert line.startswith("error: lane_in_use: lane 'ppe' of tenant 'acme' has live consumers")
    assert details == "  live_topics: acme.orders"
    assert Lane.objects.exists()
    cli.ok("lanes", "delete", "ppe", "--force")
    assert not Lane.objects.exists()


def test_a_viewer_reads_but_does_not_change(meridian: Any, acme: Tenant) -> None:
    lane_services.create_lane(acme, name="ppe", actor=SYSTEM)
    cli = meridian("viewer")
    assert "ppe" in cli.ok("lanes", "list").stdout
    cli.ok("lanes", "describe", "ppe")
    for args in (["create", "other"], ["delete", "ppe", "--force"]):
        (line, *_) = cli.refused("lanes", *args)
        assert line.startswith("error: permission_denied: "), line
    assert list(Lane.objects.values_list("name", flat=True)) == ["ppe"]


def test_another_tenants_lane_answers_like_a_missing_one(meridian: Any) -> None:
    globex = Tenant.objects.get(slug="globex")
    lane_services.create_lane(globex, name="secret", actor=SYSTEM)
    cli = meridian("developer")
    for command in ("describe", "delete"):
        other = cli.refused("lanes", command, "secret")
        missing = cli.refused("lanes", command, "missing")
        assert other == missing
        assert other[0].startswith("error: not_found: ")
    assert "secret" not in cli.ok("lanes", "list", "--json").stdout
    assert json.loads(cli.ok("lanes", "list", "--tenant", "globex", "--json").stdout) == []
    assert Lane.objects.filter(name="secret").exists()


def test_no_token_and_no_api(meridian: Any, live_server: Any) -> None:
    (line, *_) = Meridian(live_server.url, None).refused("lanes", "list")
    assert line.startswith("error: not_authenticated: ")
    [port] = free_ports(1)
    (line,) = Meridian(f"http://127.0.0.1:{port}", "a-token").refused("lanes", "list")
    assert line.startswith(f"error: unavailable: cannot reach the API at http://127.0.0.1:{port}/")
