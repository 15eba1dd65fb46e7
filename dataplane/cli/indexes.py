"""``meridian indexes``: create, list, describe, build and delete a tenant's secondary
indexes; ``meridian index query``: look records up by a field's value. Through the
control plane's REST API (``/api/v1/indexes``), as ``meridian exports``."""

from __future__ import annotations

import base64
from typing import Annotated, Any

import typer

from dataplane.cli.api import every_row, quoted, tenant_query
from dataplane.cli.base import JsonOption, TenantOption, print_json, settings, stdout, table
from dataplane.cli.exports import (
    FieldOption,
    fields_text,
    last_state,
    parse_fields,
    progress_table,
    query_suffix,
    runs_table,
)


def list_indexes(ctx: typer.Context, tenant: TenantOption = None, json: JsonOption = False) -> None:
    """List the indexes with their topic, fields, last build and lag."""
    indexes = sorted(
        every_row(settings(ctx).api, "indexes", tenant_query(tenant)),
        key=lambda i: (i["tenant"], i["name"]),
    )
    if json:
        print_json(indexes)
        return
    headers = ["index", "tenant", "topic", "fields", "last build", "lag"]
    rows = [
        [i["name"], i["tenant"], i["topic"], ", ".join(f["name"] for f in i["fields"]),
         last_state(i.get("last_build")), i["progress"]["lag_records"]]
        for i in indexes
    ]  # fmt: skip
    stdout().print(table(None, headers, rows))


def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Index name, e.g. orders-by-user.")],
    topic: Annotated[str, typer.Option("--topic", help="The topic ('<topic>' of the tenant).")],
    field: FieldOption = None,
    tenant: TenantOption = None,
    include_lanes: Annotated[
        bool, typer.Option("--include-lanes", help="Index its lane topics too.")
    ] = False,
    description: Annotated[str, typer.Option("--description")] = "",
    json: JsonOption = False,
) -> None:
    """Create index NAME of a topic on 1 to 8 --field NAME:PATH:TYPE."""
    body: dict[str, Any] = {
        "name": name,
        "topic": topic,
        "fields": parse_fields(field),
        "include_lanes": include_lanes,
        "description": description,
    }
    if tenant:
        body["tenant"] = tenant
    index = settings(ctx).api.post("indexes", body)
    if json:
        print_json(index)
        return
    stdout().print(
        f"created index {index['name']} of {index['topic']} on {fields_text(index['fields'])}"
    )


def describe(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Index name.")],
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Show index NAME: its fields, progress per partition and latest builds."""
    api = settings(ctx).api
    index = api.get(f"indexes/{quoted(name)}", tenant_query(tenant))
    builds = api.get(f"indexes/{quoted(name)}/builds", tenant_query(tenant))
    if json:
        print_json({**index, "builds": builds})
        return
    facts = [
        ["tenant", index["tenant"]],
        ["topic", index["topic"]],
        ["fields", fields_text(index["fields"])],
        ["lanes", "included" if index.get("include_lanes") else "not included"],
        ["description", index.get("description") or "-"],
        ["lag (records)", index["progress"]["lag_records"]],
        ["created", index.get("created_at")],
    ]
    out = stdout()
    out.print(table(f"index {index['name']}", ["field", "value"], facts))
    out.print(progress_table(index["progress"]))
    out.print(runs_table(builds))


def build(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Index name.")],
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Queue a build of index NAME now (it adds what the index does not cover yet)."""
    queued = settings(ctx).api.post(f"indexes/{quoted(name)}/builds{query_suffix(tenant)}", {})
    if json:
        print_json(queued)
        return
    stdout().print(f"queued build {queued['id']} of index {name}")


def delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Index name.")],
    tenant: TenantOption = None,
) -> None:
    """Delete index NAME and its files."""
    settings(ctx).api.delete(f"indexes/{quoted(name)}", tenant_query(tenant))
    stdout().print(f"deleted index {name}")


def query(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Index name.")],
    field: Annotated[str, typer.Option("--field", help="The field to look up.")],
    value: Annotated[str, typer.Option("--value", help="Its value.")],
    from_: Annotated[
        str | None, typer.Option("--from", help="From (epoch ms or ISO 8601, inclusive).")
    ] = None,
    to: Annotated[
        str | None, typer.Option("--to", help="To (epoch ms or ISO 8601, exclusive).")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many.")] = None,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Next page's cursor.")] = None,
    json: JsonOption = False,
) -> None:
    """Records of index NAME's topic whose FIELD is VALUE, from the index and the tail."""
    params: dict[str, str] = {field: value}
    optional = {"from": from_, "to": to, "limit": limit, "cursor": cursor}
    params.update({k: str(v) for k, v in optional.items() if v is not None})
    answer = settings(ctx).api.get(f"indexes/{quoted(name)}/query", params)
    if json:
        print_json(answer)
        return
    headers = ["topic", "partition", "offset", "timestamp", "key", "value"]
    rows = [
        [r["topic"], r["partition"], r["offset"], r["timestamp"], _text(r.get("key")),
         r["value_text"] if r.get("value_text") is not None else _text(r.get("value"))]
        for r in answer["records"]
    ]  # fmt: skip
    out = stdout()
    out.print(table(None, headers, rows))
    out.print(
        f"{len(rows)} records: {answer['from_index']} from the index, {answer['from_scan']} "
        "from scanning the uncovered tail"
    )
    if answer.get("next_cursor"):
        out.print(f"more: --cursor {answer['next_cursor']}")


def _text(b64: str | None) -> str:
    if b64 is None:
        return "-"
    raw = base64.b64decode(b64)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + raw.hex()
