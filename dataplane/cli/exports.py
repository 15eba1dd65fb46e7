"""``meridian exports``: create, list, describe, run and delete a tenant's Parquet
exports, through the control plane's REST API (``/api/v1/exports``, at ``--api`` or
``MERIDIAN_API_URL``) with the CLI's bearer token. ``--tenant`` names the tenant;
without it the API takes the caller's only tenant. The API's refusals are printed with
its messages per field (``dataplane.cli.base.reporting``)."""

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

FieldOption = Annotated[
    list[str] | None,
    typer.Option(
        "--field",
        help="A column NAME:PATH:TYPE read from JSON values, e.g. user_id:user.id:long "
        "(repeat it; types: string, long, double, boolean, timestamp).",
    ),
]


class ValueFormat(enum.StrEnum):
    json = "json"
    raw = "raw"


def parse_fields(specs: list[str] | None) -> list[dict[str, str]]:
    """``NAME:PATH:TYPE`` options as the API's ``[{name, path, type}]``."""
    fields = []
    for spec in specs or []:
        parts = spec.split(":")
        if len(parts) != 3 or not all(parts):
            fail(invalid(f"--field {spec!r}: NAME:PATH:TYPE, e.g. user_id:user.id:long"))
        fields.append({"name": parts[0], "path": parts[1], "type": parts[2]})
    return fields


def list_exports(ctx: typer.Context, tenant: TenantOption = None, json: JsonOption = False) -> None:
    """List the exports with their topic, schedule, last run and lag."""
    exports = sorted(
        every_row(settings(ctx).api, "exports", tenant_query(tenant)),
        key=lambda e: (e["tenant"], e["name"]),
    )
    if json:
        print_json(exports)
        return
    headers = ["export", "tenant", "topic", "schedule", "last run", "lag", "target"]
    rows = [
        [e["name"], e["tenant"], e["topic"], schedule_text(e), last_state(e.get("last_run")),
         e["progress"]["lag_records"], e["target_uri"]]
        for e in exports
    ]  # fmt: skip
    stdout().print(table(None, headers, rows))


def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Export name, e.g. orders-daily.")],
    topic: Annotated[str, typer.Option("--topic", help="The topic ('<topic>' of the tenant).")],
    tenant: TenantOption = None,
    value_format: Annotated[
        ValueFormat, typer.Option("--value-format", help="json (columns) or raw (bytes).")
    ] = ValueFormat.json,
    field: FieldOption = None,
    partition_by: Annotated[
        list[str] | None,
        typer.Option("--partition-by", help="date and/or hour directories (repeat it)."),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option("--target", help="Folder or URI (default: the platform's folder)."),
    ] = None,
    include_lanes: Annotated[
        bool, typer.Option("--include-lanes", help="Export its lane topics too.")
    ] = False,
    every_minutes: Annotated[
        int | None, typer.Option("--every-minutes", help="Run every N minutes.")
    ] = None,
    cron: Annotated[
        str | None, typer.Option("--cron", help="Run at the minutes of a cron expression (UTC).")
    ] = None,
    continuous: Annotated[
        bool, typer.Option("--continuous", help="Start a new run as soon as one ends.")
    ] = False,
    disabled: Annotated[bool, typer.Option("--disabled", help="Scheduled runs off.")] = False,
    json: JsonOption = False,
) -> None:
    """Create export NAME of a topic (manual runs unless a schedule is given)."""
    body: dict[str, Any] = {
        "name": name,
        "topic": topic,
        "value_format": value_format.value,
        "fields": parse_fields(field),
        "partition_by": list(partition_by or []),
        "include_lanes": include_lanes,
        "enabled": not disabled,
        **schedule_body(every_minutes, cron, continuous),
    }
    optional = {"tenant": tenant, "target_uri": target}
    body.update({key: value for key, value in optional.items() if value is not None})
    export = settings(ctx).api.post("exports", body)
    if json:
        print_json(export)
        return
    stdout().print(
        f"created export {export['name']} of {export['topic']} to {export['target_uri']} "
        f"({schedule_text(export)})"
    )


def schedule_body(every_minutes: int | None, cron: str | None, continuous: bool) -> dict[str, Any]:
    given = [every_minutes is not None, cron is not None, continuous]
    if sum(given) > 1:
        fail(invalid("give at most one of --every-minutes, --cron, --continuous"))
    if every_minutes is not None:
        return {"schedule_kind": "interval", "interval_minutes": every_minutes}
    if cron is not None:
        return {"schedule_kind": "cron", "cron": cron}
    return {"schedule_kind": "continuous" if continuous else "manual"}


def describe(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Export name.")],
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Show export NAME: its declaration, progress per partition and latest runs."""
    api = settings(ctx).api
    export = api.get(f"exports/{quoted(name)}", tenant_query(tenant))
    runs = api.get(f"exports/{quoted(name)}/runs", tenant_query(tenant))
    if json:
        print_json({**export, "runs": runs})
        return
    out = stdout()
    out.print(table(f"export {export['name']}", ["field", "value"], export_facts(export)))
    out.print(progress_table(export["progress"]))
    out.print(runs_table(runs))


def run(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Export name.")],
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Queue a run of export NAME now."""
    queued = settings(ctx).api.post(f"exports/{quoted(name)}/runs{query_suffix(tenant)}", {})
    if json:
        print_json(queued)
        return
    stdout().print(f"queued run {queued['id']} of export {name}")


def delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Export name.")],
    tenant: TenantOption = None,
) -> None:
    """Delete export NAME (the files it wrote stay)."""
    settings(ctx).api.delete(f"exports/{quoted(name)}", tenant_query(tenant))
    stdout().print(f"deleted export {name}")


def query_suffix(tenant: str | None) -> str:
    return f"?tenant={quoted(tenant)}" if tenant else ""


def export_facts(export: dict[str, Any]) -> list[list[Any]]:
    return [
        ["tenant", export["tenant"]],
        ["topic", export["topic"]],
        ["target", export["target_uri"]],
        ["value format", export["value_format"]],
        ["fields", fields_text(export.get("fields") or []) or "inferred"],
        ["partition by", ", ".join(export.get("partition_by") or []) or "-"],
        ["lanes", "included" if export.get("include_lanes") else "not included"],
        ["schedule", schedule_text(export)],
        ["enabled", "yes" if export.get("enabled") else "no"],
        ["lag (records)", export["progress"]["lag_records"]],
        ["created", export.get("created_at")],
    ]


def fields_text(fields: list[dict[str, str]]) -> str:
    return ", ".join(f"{f['name']}:{f['path']}:{f['type']}" for f in fields)


def schedule_text(export: dict[str, Any]) -> str:
    kind = export.get("schedule_kind")
    if kind == "interval":
        return f"every {export.get('interval_minutes')} min"
    if kind == "cron":
        return f"cron {export.get('cron')}"
    return str(kind)


def last_state(run: dict[str, Any] | None) -> str:
    return "-" if not run else f"{run['state']} ({run.get('finished_at') or run['queued_at']})"


def progress_table(progress: dict[str, Any]) -> Any:
    covered = progress.get("covered") or {}
    rows = [
        [partition, covered.get(partition, 0), lag]
        for partition, lag in sorted((progress.get("lag") or {}).items())
    ]
    return table("progress", ["partition", "covered to", "lag"], rows)


def runs_table(runs: list[dict[str, Any]]) -> Any:
    headers = ["run", "state", "trigger", "queued", "finished", "rows", "bytes", "files",
               "dead letters", "error"]  # fmt: skip
    rows = [
        [r["id"], r["state"], r["trigger"], r["queued_at"], r.get("finished_at") or "-",
         r["rows"], r["bytes"], r["files"], r["dead_letter_rows"],
         (r.get("error") or "").splitlines()[0][:80] if r.get("error") else ""]
        for r in runs
    ]  # fmt: skip
    return table("runs", headers, rows)
