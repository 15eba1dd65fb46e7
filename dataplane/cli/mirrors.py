"""``meridian mirrors``: create, list, describe, pause, resume and delete a tenant's
mirror links (topics copied between regions), and ``meridian groups failover``: move a
consumer group's committed positions to the other region of a link. Through the control
plane's REST API (``/api/v1/mirrors``), as ``meridian exports``; ``--tenant`` names the
tenant, without it the API takes the caller's only tenant."""

from __future__ import annotations

import enum
from typing import Annotated, Any

import typer

from dataplane.cli.api import every_row, quoted, tenant_query
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
from dataplane.cli.exports import query_suffix

NameArgument = Annotated[str, typer.Argument(help="Mirror link name.")]


class Direction(enum.StrEnum):
    one_way = "one-way"
    two_way = "two-way"


class StartPosition(enum.StrEnum):
    earliest = "earliest"
    latest = "latest"
    timestamp = "timestamp"


def list_mirrors(ctx: typer.Context, tenant: TenantOption = None, json: JsonOption = False) -> None:
    """List the mirror links with their regions, topics, health and lag."""
    links = sorted(
        every_row(settings(ctx).api, "mirrors", tenant_query(tenant)),
        key=lambda m: (m["tenant"], m["name"]),
    )
    if json:
        print_json(links)
        return
    headers = ["mirror", "tenant", "regions", "topics", "status", "health", "lag", "lag (s)"]
    rows = [
        [m["name"], m["tenant"], regions_text(m), topics_text(m), m["status"], m["health"],
         m.get("lag_records"), seconds_text(m.get("lag_seconds"))]
        for m in links
    ]  # fmt: skip
    stdout().print(table(None, headers, rows))


def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Mirror link name, e.g. orders-to-west.")],
    source_region: Annotated[
        str, typer.Option("--from", help="The source region (where the topics are).")
    ],
    target_region: Annotated[
        str, typer.Option("--to", help="The target region (where the copies are made).")
    ],
    topic: Annotated[
        list[str] | None,
        typer.Option("--topic", help="A topic of the tenant, short name (repeat it)."),
    ] = None,
    pattern: Annotated[
        str | None,
        typer.Option(
            "--pattern",
            help="Instead: a glob on short topic names (* any text, ? one character, "
            "\\[abc] one of a set), e.g. 'billing-*'.",
        ),
    ] = None,
    direction: Annotated[
        Direction, typer.Option("--direction", help="one-way, or two-way (copies both ways).")
    ] = Direction.one_way,
    include_lanes: Annotated[
        bool, typer.Option("--include-lanes", help="Mirror their lane topics too.")
    ] = False,
    start: Annotated[
        StartPosition,
        typer.Option("--start", help="Where copying starts: earliest, latest or timestamp."),
    ] = StartPosition.earliest,
    start_timestamp_ms: Annotated[
        int | None,
        typer.Option("--start-timestamp-ms", help="With --start timestamp: epoch milliseconds."),
    ] = None,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused.")] = False,
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Create mirror link NAME copying --topic (or --pattern) --from one region --to
    another."""
    if bool(topic) == (pattern is not None):
        fail(invalid("give --topic (one or more) or --pattern, not both"))
    body: dict[str, Any] = {
        "name": name,
        "source_region": source_region,
        "target_region": target_region,
        "direction": direction.value,
        "include_lanes": include_lanes,
        "start_position": start.value,
        "paused": paused,
        **({"topics": list(topic or [])} if topic else {"topic_pattern": pattern}),
    }
    optional = {"tenant": tenant, "start_timestamp_ms": start_timestamp_ms}
    body.update({key: value for key, value in optional.items() if value is not None})
    link = settings(ctx).api.post("mirrors", body)
    if json:
        print_json(link)
        return
    stdout().print(
        f"created mirror {link['name']}: {topics_text(link)} {regions_text(link)} "
        f"(status {link['status']})"
    )


def describe(
    ctx: typer.Context, name: NameArgument, tenant: TenantOption = None, json: JsonOption = False
) -> None:
    """Show mirror link NAME: its declaration, health and lag per partition."""
    link = settings(ctx).api.get(f"mirrors/{quoted(name)}", tenant_query(tenant))
    if json:
        print_json(link)
        return
    out = stdout()
    out.print(table(f"mirror {link['name']}", ["field", "value"], link_facts(link)))
    out.print(lag_table(link.get("partitions") or []))


def pause(
    ctx: typer.Context, name: NameArgument, tenant: TenantOption = None, json: JsonOption = False
) -> None:
    """Pause mirror link NAME: its workers stop; copying resumes where it stopped."""
    _set_paused(ctx, name, tenant, json, paused=True)


def resume(
    ctx: typer.Context, name: NameArgument, tenant: TenantOption = None, json: JsonOption = False
) -> None:
    """Resume paused mirror link NAME."""
    _set_paused(ctx, name, tenant, json, paused=False)


def _set_paused(
    ctx: typer.Context, name: str, tenant: str | None, json: bool, *, paused: bool
) -> None:
    link = settings(ctx).api.patch(
        f"mirrors/{quoted(name)}", {"paused": paused}, tenant_query(tenant)
    )
    if json:
        print_json(link)
        return
    stdout().print(f"{'paused' if paused else 'resumed'} mirror {link['name']}")


def delete(ctx: typer.Context, name: NameArgument, tenant: TenantOption = None) -> None:
    """Delete mirror link NAME: its workers stop; the copies and their records stay."""
    settings(ctx).api.delete(f"mirrors/{quoted(name)}", tenant_query(tenant))
    stdout().print(f"deleting mirror {name} (its copies stay)")


def failover_group(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="Group id, e.g. acme.billing.")],
    mirror: Annotated[str, typer.Option("--mirror", help="The mirror link the group reads.")],
    to_region: Annotated[
        str, typer.Option("--to", help="The region the group moves to (one of the link's).")
    ],
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Move GROUP's committed offsets to region --to: each partition's position is
    translated through the mirror's offset map (the group must have no live members)."""
    answer = settings(ctx).api.post(
        f"mirrors/{quoted(mirror)}/failover-group{query_suffix(tenant)}",
        {"group": group, "to_region": to_region},
    )
    if json:
        print_json(answer)
        return
    out = stdout()
    out.print(f"group {group} moved to {answer.get('to_region', to_region)}")
    out.print(failover_table(answer.get("partitions") or []))


def regions_text(link: dict[str, Any]) -> str:
    arrow = "<->" if link.get("direction") == "two-way" else "->"
    return f"{link['source_region']} {arrow} {link['target_region']}"


def topics_text(link: dict[str, Any]) -> str:
    if link.get("topic_pattern"):
        return f"matching {link['topic_pattern']}"
    return ", ".join(link.get("topics") or [])


def seconds_text(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f}"


def link_facts(link: dict[str, Any]) -> list[list[Any]]:
    start = link.get("start_position")
    if start == "timestamp":
        start = f"timestamp {link.get('start_timestamp_ms')}"
    return [
        ["tenant", link["tenant"]],
        ["regions", regions_text(link)],
        ["topics", topics_text(link)],
        ["lanes", "included" if link.get("include_lanes") else "not included"],
        ["start", start],
        ["paused", "yes" if link.get("paused") else "no"],
        ["status", _with_reason(link["status"], link.get("status_reason"))],
        ["health", _with_reason(link["health"], link.get("health_reason"))],
        ["lag (records)", link.get("lag_records")],
        ["lag (seconds)", seconds_text(link.get("lag_seconds"))],
        ["created", link.get("created_at")],
    ]


def _with_reason(state: str, reason: str | None) -> str:
    return f"{state}: {reason}" if reason else state


def lag_table(partitions: list[dict[str, Any]]) -> Any:
    headers = ["from", "to", "topic", "partition", "next offset", "end offset", "lag",
               "lag (s)", "copied", "updated"]  # fmt: skip
    ordered = sorted(
        partitions, key=lambda p: (p["from_region"], p["source_topic"], p["partition"])
    )
    rows = [
        [p["from_region"], p["to_region"], p["source_topic"], p["partition"],
         p.get("next_source_offset"), p.get("source_end_offset"), p.get("lag_records"),
         seconds_text(p.get("lag_seconds")), p.get("copied_records"), p.get("updated_at")]
        for p in ordered
    ]  # fmt: skip
    return table("lag per partition", headers, rows)


def failover_table(partitions: list[dict[str, Any]]) -> Any:
    headers = ["topic", "partition", "from offset", "to offset", "exact", "may repeat"]
    rows = [
        [p["topic"], p["partition"], p.get("from_offset"), p.get("to_offset"),
         "yes" if p.get("exact") else "no", p.get("may_repeat")]
        for p in sorted(partitions, key=lambda p: (p["topic"], p["partition"]))
    ]  # fmt: skip
    return table("positions", headers, rows)
