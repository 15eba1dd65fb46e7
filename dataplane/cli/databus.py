"""``meridian databus``: a tenant's Databus configurations (list, describe, apply from a
JSON file, delete) and the agents running them.

Configurations and agents live in the control plane: these commands call its REST API
(``/api/v1/databus-configs``, ``/api/v1/databus-agents``, at ``--api`` or
``MERIDIAN_API_URL``) with the CLI's bearer token. ``--tenant`` names the tenant;
without it the API takes the caller's only tenant. The API's refusals are printed with
its messages per field: a document's, named as the schema names them
(``document: streams.clicks.linger_ms: must be ...``).
"""

from __future__ import annotations

import json as jsonlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from dataplane.cli.api import ApiError, every_row, quoted, tenant_query
from dataplane.cli.base import (
    JsonOption,
    TenantOption,
    fail,
    invalid,
    print_json,
    settings,
    stdout,
    table,
)

CONFIGS = "databus-configs"
AGENTS = "databus-agents"


def list_configs(ctx: typer.Context, tenant: TenantOption = None, json: JsonOption = False) -> None:
    """List the Databus configurations with their version and streams."""
    configs = sorted(every_row(settings(ctx).api, CONFIGS, tenant_query(tenant)), key=_tenant_name)
    if json:
        print_json(configs)
        return
    headers = ["config", "tenant", "version", "streams", "description"]
    rows = [
        [c["name"], c["tenant"], c["version"], _streams(c), c.get("description") or "-"]
        for c in configs
    ]
    stdout().print(table(None, headers, rows))


def describe(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Configuration name.")],
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Show configuration NAME: its version, each stream's settings and topic, and the
    agents running it."""
    api = settings(ctx).api
    config = api.get(f"{CONFIGS}/{quoted(name)}", tenant_query(tenant))
    if json:
        print_json(config)
        return
    out = stdout()
    facts = [
        ["tenant", config["tenant"]],
        ["version", config["version"]],
        ["description", config.get("description") or "-"],
        ["updated", config.get("updated_at")],
    ]
    out.print(table(f"databus config {config['name']}", ["field", "value"], facts))
    out.print(table("streams", STREAM_HEADERS, _stream_rows(config)))
    query = {**tenant_query(config["tenant"]), "config": config["name"]}
    agents = list(every_row(api, AGENTS, query))
    if agents:
        out.print(table("agents", AGENT_HEADERS, [_agent_row(a) for a in agents]))


def apply(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Configuration name.")],
    file: Annotated[
        str,
        typer.Option("--file", "-f", help="The configuration document, JSON ('-': stdin)."),
    ],
    description: Annotated[
        str | None,
        typer.Option("--description", help="Its description (default: unchanged, or empty)."),
    ] = None,
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Create configuration NAME from FILE, or update it: a changed document moves its
    version up by one (the agents watching it apply the new one)."""
    document = _read_document(file)
    api = settings(ctx).api
    body: dict[str, Any] = {"document": document}
    if description is not None:
        body["description"] = description
    try:
        config = api.patch(f"{CONFIGS}/{quoted(name)}", body, tenant_query(tenant))
        verb = "applied"
    except ApiError as exc:
        if exc.status != 404:
            raise
        extra = {"tenant": tenant} if tenant else {}
        config = api.post(CONFIGS, {"name": name, **body, **extra})
        verb = "created"
    if json:
        print_json(config)
        return
    stdout().print(
        f"{verb} databus config {config['name']} of tenant {config['tenant']}: "
        f"version {config['version']}"
    )


def delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Configuration name.")],
    tenant: TenantOption = None,
) -> None:
    """Delete configuration NAME (its agents keep running the version they have)."""
    settings(ctx).api.delete(f"{CONFIGS}/{quoted(name)}", tenant_query(tenant))
    stdout().print(f"deleted databus config {name}")


def list_agents(
    ctx: typer.Context,
    config: Annotated[
        str | None, typer.Option("--config", "-c", help="Only the agents running this one.")
    ] = None,
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """List the Databus agents: the configuration and version each runs, whether it is
    up to date and live (a heartbeat within 60 s), and its spool."""
    query = tenant_query(tenant)
    if config:
        query["config"] = config
    agents = list(every_row(settings(ctx).api, AGENTS, query))
    if json:
        print_json(agents)
        return
    stdout().print(table(None, AGENT_HEADERS, [_agent_row(a) for a in agents]))


STREAM_HEADERS = ["stream", "topic", "lane", "delivery", "compression", "linger ms", "partitions"]
AGENT_HEADERS = [
    "agent",
    "config",
    "version",
    "up to date",
    "host",
    "pid",
    "live",
    "last seen",
    "spool records",
    "spool bytes",
]


def _read_document(file: str) -> Any:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
    except OSError as exc:
        fail(invalid(f"cannot read {file}: {exc.strerror or exc}"))
    try:
        return jsonlib.loads(text)
    except ValueError as exc:
        fail(invalid(f"{file} is not JSON: {exc}"))


def _tenant_name(row: dict[str, Any]) -> tuple[str, str]:
    return (row["tenant"], row["name"])


def _streams(config: dict[str, Any]) -> str:
    return ", ".join(sorted((config.get("document") or {}).get("streams", {}))) or "-"


def _stream_rows(config: dict[str, Any]) -> list[list[Any]]:
    streams = (config.get("document") or {}).get("streams", {})
    resolved = config.get("resolved") or {}
    return [
        [
            name,
            s["topic"],
            s.get("lane") or "-",
            s.get("delivery"),
            s.get("compression"),
            s.get("linger_ms"),
            (resolved.get(name) or {}).get("partitions") or "topic gone",
        ]
        for name, s in sorted(streams.items())
    ]


def _agent_row(agent: dict[str, Any]) -> list[Any]:
    spool = [0, 0]
    for counters in (agent.get("stats") or {}).values():
        spool[0] += counters.get("spool_records", 0)
        spool[1] += counters.get("spool_bytes", 0)
    return [
        agent["agent_id"],
        agent["config"],
        agent["version"],
        "yes" if agent["up_to_date"] else "no",
        agent["hostname"],
        agent["pid"],
        "yes" if agent["live"] else "no",
        agent["last_seen"],
        spool[0],
        spool[1],
    ]
