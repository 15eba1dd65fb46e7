"""``meridian databus`` against a real control plane (pytest-django's live server, a
token of the local issuer, the CLI in-process with ``--api`` and ``--token``): apply
creates then updates (the version moves only with the document), list and describe
(with the agents running it), the document's refusals printed with the schema's field
names, roles, another tenant's configuration answering like a missing one, agents."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from controlplane.accounts.identity import LocalIdentity
from controlplane.core.actors import Actor
from controlplane.databus import services as databus_services
from controlplane.databus.models import DatabusConfig
from controlplane.tenants.models import Tenant
from controlplane.topics import services as topic_services
from tests.controlplane.api_base import make_cluster
from tests.controlplane.conftest import local_identity, token_for
from tests.dataplane.cli.test_lanes import Meridian
from tests.support.controlplane import make_tenant

__all__ = ["local_identity"]

SYSTEM = Actor.system("tests")
SPOOL = {
    "records_in": 5, "records_out": 3, "bytes_in": 50, "bytes_out": 30, "spool_records": 2,
    "spool_bytes": 20, "spool_age_s": 1.5, "dropped": 0, "rejected": 0,
}  # fmt: skip


@pytest.fixture
def acme(transactional_db: None) -> Tenant:
    cluster = make_cluster()
    globex = make_tenant("globex", region=cluster.region)
    tenant = make_tenant("acme", region=cluster.region)
    topic_services.create_topic(tenant, name="orders", partitions=2, actor=SYSTEM)
    topic_services.create_topic(globex, name="orders", partitions=2, actor=SYSTEM)
    return tenant


@pytest.fixture
def meridian(live_server: Any, local_identity: LocalIdentity, acme: Tenant) -> Any:
    def as_role(role: str | None = "developer") -> Meridian:
        roles = {"acme": role} if role else {}
        return Meridian(live_server.url, token_for(local_identity, roles=roles))

    return as_role


def write(tmp_path: Path, document: Any, name: str = "web.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def clicks(**settings: Any) -> dict[str, Any]:
    return {"streams": {"clicks": {"topic": "acme.orders", **settings}}}


def test_apply_creates_then_updates_and_list_and_describe_show_it(
    meridian: Any, acme: Tenant, tmp_path: Path
) -> None:
    cli = meridian("developer")
    first = write(tmp_path, clicks())
    created = cli.ok("databus", "configs", "apply", "web", "-f", first, "--description", "web")
    assert created.stdout.strip() == "created databus config web of tenant acme: version 1"
    changed = write(tmp_path, clicks(linger_ms=5, compression="zstd"), "changed.json")
    applied = cli.ok("databus", "configs", "apply", "web", "-f", changed)
    assert applied.stdout.strip() == "applied databus config web of tenant acme: version 2"
    assert "version 2" in cli.ok("databus", "configs", "apply", "web", "-f", changed).stdout
    config = DatabusConfig.objects.get(tenant=acme, name="web")
    assert (config.version, config.description) == (2, "web")  # description kept

    listed = cli.ok("databus", "configs", "list").stdout.splitlines()
    assert listed[0].split() == ["config", "tenant", "version", "streams", "description"]
    assert listed[1].split() == ["web", "acme", "2", "clicks", "web"]
    as_json = json.loads(cli.ok("databus", "configs", "list", "--json").stdout)
    assert [(c["name"], c["version"]) for c in as_json] == [("web", 2)]

    agent_id = uuid.uuid4()
    databus_services.record_agent_heartbeat(
        acme, agent_id=agent_id, config_name="web", version=1, hostname="web-1", pid=7,
        started_at=timezone.now(), stats={"clicks": SPOOL}, principal="p",
    )  # fmt: skip
    described = cli.ok("databus", "configs", "describe", "web").stdout
    head, rest = described.split("streams\n")
    streams, agents = rest.split("agents\n")
    assert ["version", "2"] in [line.split() for line in head.splitlines()]
    assert streams.splitlines()[1].split() == [
        "clicks", "acme.orders", "-", "ack_on_spool", "zstd", "5", "2",
    ]  # fmt: skip
    row = agents.splitlines()[1].split()
    assert row[:7] == [str(agent_id), "web", "1", "no", "web-1", "7", "yes"]
    assert row[-2:] == ["2", "20"]
    as_json = json.loads(cli.ok("databus", "configs", "describe", "web", "--json").stdout)
    assert as_json["resolved"]["clicks"] == {
        "topic": "acme.orders", "max_record_bytes": 1_048_576, "partitions": 2,
    }  # fmt: skip

    agents_out = cli.ok("databus", "agents", "--config", "web").stdout.splitlines()
    assert agents_out[1].split()[:4] == [str(agent_id), "web", "1", "no"]
    assert cli.ok("databus", "agents", "--config", "other").stdout.count("\n") <= 3
    assert json.loads(cli.ok("databus", "agents", "--json").stdout)[0]["up_to_date"] is False

    assert cli.ok("databus", "configs", "delete", "web").stdout.strip() == (
        "deleted databus config web"
    )
    assert not DatabusConfig.objects.exists()


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            clicks(linger_ms=70_000),
            [
                "error: invalid: document: streams.clicks.linger_ms: must be an integer from "
                "0 to 60000",
                "  document: streams.clicks.linger_ms: must be an integer from 0 to 60000",
            ],
        ),
        (
            {"streams": {"clicks": {"topic": "globex.orders"}}},
            [
                "error: invalid: document: streams.clicks.topic: no topic 'globex.orders' in "
                "tenant 'acme'",
                "  document: streams.clicks.topic: no topic 'globex.orders' in tenant 'acme'",
            ],
        ),
    ],
)
def test_a_refused_document_prints_the_field_messages(
    meridian: Any, tmp_path: Path, document: Any, expected: list[str]
) -> None:
    lines = meridian("developer").refused(
        "databus", "configs", "apply", "web", "-f", write(tmp_path, document)
    )
    assert lines == expected
    assert not DatabusConfig.objects.exists()


def test_a_file_that_is_not_json_or_missing(meridian: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    (line,) = meridian().refused("databus", "configs", "apply", "web", "-f", str(bad))
    assert line.startswith(f"error: INVALID_REQUEST: {bad} is not JSON")
    (line,) = meridian().refused("databus", "configs", "apply", "web", "-f", str(tmp_path / "no"))
    assert line.startswith("error: INVALID_REQUEST: cannot read")


def test_a_viewer_reads_but_does_not_change(meridian: Any, acme: Tenant, tmp_path: Path) -> None:
    databus_services.create_databus_config(acme, name="web", document=clicks(), actor=SYSTEM)
    cli = meridian("viewer")
    assert "web" in cli.ok("databus", "configs", "list").stdout
    cli.ok("databus", "configs", "describe", "web")
    for args in (
        ["apply", "web", "-f", write(tmp_path, clicks(linger_ms=1))],
        ["apply", "new", "-f", write(tmp_path, clicks())],
        ["delete", "web"],
    ):
        (line, *_) = cli.refused("databus", "configs", *args)
        assert line.startswith("error: permission_denied: "), line
    assert DatabusConfig.objects.get(name="web").version == 1


def test_another_tenants_config_answers_like_a_missing_one(meridian: Any) -> None:
    globex = Tenant.objects.get(slug="globex")
    document = {"streams": {"s": {"topic": "globex.orders"}}}
    databus_services.create_databus_config(globex, name="secret", document=document, actor=SYSTEM)
    cli = meridian("developer")
    for command in ("describe", "delete"):
        other = cli.refused("databus", "configs", command, "secret")
        missing = cli.refused("databus", "configs", command, "missing")
        assert other == [line.replace("missing", "secret") for line in missing]
        assert other[0].startswith("error: not_found: ")
    assert "secret" not in cli.ok("databus", "configs", "list", "--json").stdout
    assert DatabusConfig.objects.filter(name="secret").exists()
