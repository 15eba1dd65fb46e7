"""``meridian lanes``: list, create, describe and delete a tenant's lanes.

Lanes live in the control plane, not on the brokers: these commands call its REST API
(``/api/v1/lanes``, at ``--api`` or ``MERIDIAN_API_URL``) with the CLI's bearer token.
``--tenant`` names the tenant; without it the API takes the caller's only tenant (a
caller of several is asked to name one). The API's refusals are printed with its
messages per field (``dataplane.cli.base.reporting``).
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

import typer

from dataplane.cli.api import every_row, quoted, tenant_query
from dataplane.cli.base import JsonOption, TenantOption, print_json, settings, stdout, table


class OrphanPolicy(enum.StrEnum):
    trunk = "trunk"
    hold = "hold"


def list_lanes(ctx: typer.Context, tenant: TenantOption = None, json: JsonOption = False) -> None:
    """List the lanes with what they cover, how they are consumed and where they are live."""
    lanes = sorted(
        every_row(settings(ctx).api, "lanes", tenant_query(tenant)), key=_tenant_and_name
    )
    if json:
        print_json(lanes)
        return
    headers = ["lane", "tenant", "topics", "consume trunk", "orphans", "ttl", "live for"]
    rows = [
        [
            lane["name"],
            lane["tenant"],
            _covered(lane),
            _yes_no(lane["consume_trunk"]),
            lane["orphan_policy"],
            _ttl(lane.get("ttl_s")),
            ", ".join(lane.get("live_topics") or []) or "-",
        ]
        for lane in lanes
    ]
    stdout().print(table(None, headers, rows))


def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Lane name, e.g. ppe or boe-alice.")],
    tenant: TenantOption = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            help="A trunk topic the lane covers (repeat it); none: all the tenant's topics.",
        ),
    ] = None,
    consume_trunk: Annotated[
        bool, typer.Option("--consume-trunk", help="Its consumers also read trunk traffic.")
    ] = False,
    orphan_policy: Annotated[
        OrphanPolicy,
        typer.Option(
            "--orphan-policy",
            help="While no consumer of the lane is live: trunk (the trunk's groups read its "
            "records) or hold (they wait in the lane topic).",
        ),
    ] = OrphanPolicy.trunk,
    ttl_s: Annotated[
        int | None,
        typer.Option("--ttl-s", help="Deleted after this many seconds without traffic."),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(help="Partitions of its lane topics (default: the trunk topic's count)."),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Create lane NAME."""
    body: dict[str, Any] = {
        "name": name,
        "all_topics": not topic,
        "topics": list(topic or []),
        "consume_trunk": consume_trunk,
        "orphan_policy": orphan_policy.value,
    }
    optional = {"tenant": tenant, "ttl_s": ttl_s, "partitions": partitions}
    body.update({key: value for key, value in optional.items() if value is not None})
    lane = settings(ctx).api.post("lanes", body)
    if json:
        print_json(lane)
        return
    stdout().print(f"created lane {lane['name']} of tenant {lane['tenant']} ({_covered(lane)})")


def describe(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Lane name.")],
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Show lane NAME: what it covers, where it is live, its last traffic, its lane topics."""
    lane = settings(ctx).api.get(f"lanes/{quoted(name)}", tenant_query(tenant))
    if json:
        print_json(lane)
        return
    out = stdout()
    out.print(table(f"lane {lane['name']}", ["field", "value"], _facts(lane)))
    lane_topics = lane.get("lane_topics") or []
    if lane_topics:
        headers = ["lane topic", "trunk", "partitions", "status", "last traffic"]
        out.print(table("lane topics", headers, _lane_topic_rows(lane_topics)))


def delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Lane name.")],
    tenant: TenantOption = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Delete it even while it has live consumers."),
    ] = False,
) -> None:
    """Delete lane NAME and its lane topics (with live consumers: only with --force)."""
    query = tenant_query(tenant)
    if force:
        query["force"] = "true"
    settings(ctx).api.delete(f"lanes/{quoted(name)}", query)
    stdout().print(f"deleted lane {name}")


def _tenant_and_name(lane: dict[str, Any]) -> tuple[str, str]:
    return (lane["tenant"], lane["name"])


def _facts(lane: dict[str, Any]) -> list[list[Any]]:
    return [
        ["tenant", lane["tenant"]],
        ["topics", _covered(lane)],
        ["consume trunk", _yes_no(lane["consume_trunk"])],
        ["orphan policy", lane["orphan_policy"]],
        ["ttl", _ttl(lane.get("ttl_s"))],
        ["partitions", lane.get("partitions") or "the trunk's count"],
        ["live for", ", ".join(lane.get("live_topics") or []) or "none"],
        ["last live", lane.get("last_live_at")],
        ["last traffic", lane.get("last_traffic_at")],
        ["created", lane.get("created_at")],
    ]


def _lane_topic_rows(lane_topics: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [t["name"], t["trunk"], t.get("partitions"), t.get("status"), t.get("last_traffic_at")]
        for t in lane_topics
    ]


def _covered(lane: dict[str, Any]) -> str:
    if lane.get("all_topics"):
        return "all topics"
    return ", ".join(lane.get("topics") or []) or "no topics"


def _ttl(ttl_s: int | None) -> str:
    if not ttl_s:
        return "-"
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60)):
        if ttl_s % seconds == 0:
            return f"{ttl_s // seconds}{unit}"
    return f"{ttl_s}s"


def _yes_no(value: Any) -> str:
    return "yes" if value else "no"
