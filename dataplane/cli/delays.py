"""``meridian delayed`` and ``meridian dlq``: delayed records and dead letters.

``delayed pending|list|cancel`` ask the brokers leading the tenant's timer partitions
(the Delay service, with the CLI's token), so they work on any cluster; ``produce
--deliver-after`` schedules (``produce.py``). ``dlq`` and ``retry-policies`` call the
control plane's REST API (``/api/v1/retry-policies``, at ``--api``): a group's retry
policy, its dead letters, and replaying them to their topics (audited).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from dataplane.cli.api import every_row, quoted, tenant_query
from dataplane.cli.base import (
    JsonOption,
    TenantOption,
    invalid,
    print_json,
    settings,
    stdout,
    table,
)
from dataplane.client.connection import ChannelSecurity, ConnectionPool
from dataplane.client.delayed import DelayClient
from dataplane.client.metadata import ClusterMetadata


def _when(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _client(ctx: typer.Context) -> tuple[DelayClient, ConnectionPool]:
    found = settings(ctx)
    pool = ConnectionPool(
        found.bootstrap, client_id="meridian-cli", security=ChannelSecurity.of(**found.connect)
    )
    return DelayClient(ClusterMetadata(pool)), pool


TenantArgument = Annotated[str, typer.Argument(help="Tenant slug (its timer log).")]


def pending(ctx: typer.Context, tenant: TenantArgument, json: JsonOption = False) -> None:
    """Count TENANT's pending delayed records, by topic and timer partition."""
    client, pool = _client(ctx)
    try:
        states = client.pending(tenant)
    finally:
        pool.close()
    if json:
        print_json(
            [
                {
                    "partition": s.partition,
                    "pending_records": s.pending_records,
                    "pending_bytes": s.pending_bytes,
                    "next_deliver_at_ms": s.next_deliver_at_ms,
                    "topics": {t.topic: t.records for t in s.topics},
                }
                for s in states
            ]
        )
        return
    rows = [
        [s.partition, s.pending_records, s.pending_bytes, _when(s.next_deliver_at_ms),
         ", ".join(f"{t.topic}: {t.records}" for t in s.topics) or "-"]
        for s in states
    ]  # fmt: skip
    headers = ["timer partition", "pending", "bytes", "next due", "by topic"]
    stdout().print(table(f"delayed records of {tenant}", headers, rows))


def list_delayed(
    ctx: typer.Context,
    tenant: TenantArgument,
    topic: Annotated[str, typer.Option(help="Only records for this topic.")] = "",
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    json: JsonOption = False,
) -> None:
    """List TENANT's scheduled records by due time, with their ids."""
    client, pool = _client(ctx)
    try:
        records = client.scheduled(tenant, topic=topic, limit=limit, value_bytes=64)
    finally:
        pool.close()
    if json:
        print_json(
            [
                {
                    "id": r.id,
                    "topic": r.topic,
                    "partition": r.partition,
                    "deliver_at_ms": r.deliver_at,
                    "key": None if r.key is None else base64.b64encode(r.key).decode(),
                    "value_size": r.value_size,
                }
                for r in records
            ]
        )
        return
    rows = [
        [r.id, r.topic, r.partition, _when(r.deliver_at), _shown(r.key), _shown(r.value)]
        for r in records
    ]
    headers = ["id", "topic", "partition", "due", "key", "value"]
    stdout().print(table(f"scheduled records of {tenant}", headers, rows))


def cancel(
    ctx: typer.Context,
    ids: Annotated[
        list[str], typer.Argument(help="Scheduled record ids (topic:partition:offset).")
    ],
) -> None:
    """Cancel scheduled records by id; each prints when it was due."""
    client, pool = _client(ctx)
    try:
        for delayed_id in ids:
            due = client.cancel(delayed_id)
            stdout().print(f"cancelled {delayed_id} (due {_when(due)})")
    finally:
        pool.close()


def _shown(value: bytes | None) -> str:
    if value is None:
        return "-"
    try:
        return value.decode()[:40]
    except UnicodeDecodeError:
        return f"<{len(value)} bytes>"


# -- retry policies and dead letters (REST) ---------------------------------------------------
GroupArgument = Annotated[
    str, typer.Argument(help="Consumer group without its tenant prefix (billing).")
]


def list_policies(
    ctx: typer.Context, tenant: TenantOption = None, json: JsonOption = False
) -> None:
    """List consumer groups' retry policies."""
    policies = list(every_row(settings(ctx).api, "retry-policies", tenant_query(tenant)))
    if json:
        print_json(policies)
        return
    headers = ["group", "max attempts", "backoff (ms)", "retry topic", "dead letters"]
    rows = [
        [p["group_id"], p["max_attempts"], _backoff(p), p["retry_topic"], p["dead_letter_topic"]]
        for p in policies
    ]
    stdout().print(table(None, headers, rows))


def _backoff(policy: dict[str, Any]) -> str:
    return (
        f"{policy['backoff_initial_ms']} x{policy['backoff_multiplier']:g} "
        f"up to {policy['backoff_max_ms']}"
    )


def create_policy(
    ctx: typer.Context,
    group: GroupArgument,
    tenant: TenantOption = None,
    max_attempts: Annotated[
        int | None, typer.Option(help="Deliveries before a dead letter.")
    ] = None,
    backoff_initial_ms: Annotated[int | None, typer.Option(help="First retry's wait.")] = None,
    backoff_multiplier: Annotated[float | None, typer.Option(help="Each wait's growth.")] = None,
    backoff_max_ms: Annotated[int | None, typer.Option(help="The longest wait.")] = None,
    partitions: Annotated[int | None, typer.Option(help="Of its two topics (default 1).")] = None,
    json: JsonOption = False,
) -> None:
    """Give consumer group GROUP a retry policy (and its retry and dead-letter topics)."""
    body: dict[str, Any] = {"group": group}
    optional = {
        "tenant": tenant,
        "max_attempts": max_attempts,
        "backoff_initial_ms": backoff_initial_ms,
        "backoff_multiplier": backoff_multiplier,
        "backoff_max_ms": backoff_max_ms,
        "partitions": partitions,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    policy = settings(ctx).api.post("retry-policies", body)
    if json:
        print_json(policy)
        return
    stdout().print(
        f"created the retry policy of {policy['group_id']}: {policy['max_attempts']} attempts, "
        f"retries on {policy['retry_topic']}, dead letters on {policy['dead_letter_topic']}"
    )


def describe_policy(
    ctx: typer.Context, group: GroupArgument, tenant: TenantOption = None, json: JsonOption = False
) -> None:
    """Show GROUP's retry policy."""
    policy = settings(ctx).api.get(f"retry-policies/{quoted(group)}", tenant_query(tenant))
    if json:
        print_json(policy)
        return
    rows = [
        [k, policy[k]] for k in ("group_id", "max_attempts", "retry_topic", "dead_letter_topic")
    ]
    rows.append(["backoff (ms)", _backoff(policy)])
    stdout().print(table(f"retry policy of {policy['group_id']}", ["field", "value"], rows))


def delete_policy(ctx: typer.Context, group: GroupArgument, tenant: TenantOption = None) -> None:
    """Delete GROUP's retry policy with its retry and dead-letter topics."""
    settings(ctx).api.delete(f"retry-policies/{quoted(group)}", tenant_query(tenant))
    stdout().print(f"deleted the retry policy of {group}")


def list_dead_letters(
    ctx: typer.Context,
    group: GroupArgument,
    tenant: TenantOption = None,
    partition: Annotated[int, typer.Option(min=0, help="Dead-letter topic partition.")] = 0,
    offset: Annotated[int | None, typer.Option(min=0, help="From this offset.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 50,
    json: JsonOption = False,
) -> None:
    """List GROUP's dead letters (one partition, from OFFSET)."""
    query = tenant_query(tenant) | {"partition": str(partition), "limit": str(limit)}
    if offset is not None:
        query["offset"] = str(offset)
    page = settings(ctx).api.get(f"retry-policies/{quoted(group)}/dead-letters", query)
    if json:
        print_json(page)
        return
    rows = [
        [f"{r['partition']}:{r['offset']}", _when(r["timestamp"]), r["origin_topic"],
         r["attempts"], r["reason"], (r.get("value_text") or "")[:40]]
        for r in page["records"]
    ]  # fmt: skip
    headers = ["place", "time", "from topic", "attempts", "reason", "value"]
    stdout().print(table(f"dead letters of {group}", headers, rows))
    if page.get("next_offset") is not None:
        stdout().print(f"more from --offset {page['next_offset']}")


def show_dead_letter(
    ctx: typer.Context,
    group: GroupArgument,
    partition: Annotated[int, typer.Argument(min=0)],
    offset: Annotated[int, typer.Argument(min=0)],
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Show one dead letter with its headers and why it is one."""
    path = f"retry-policies/{quoted(group)}/dead-letters/{partition}/{offset}"
    letter = settings(ctx).api.get(path, tenant_query(tenant))
    if json:
        print_json(letter)
        return
    rows = [[k, letter[k]] for k in ("reason", "origin_topic", "origin_partition", "attempts")]
    rows += [["key", letter.get("key_text") or letter.get("key")],
             ["value", letter.get("value_text") or letter.get("value")]]  # fmt: skip
    rows += [[f"header {h['key']}", h.get("text") or h.get("value")] for h in letter["headers"]]
    stdout().print(table(f"dead letter {partition}:{offset} of {group}", ["field", "value"], rows))


def replay(
    ctx: typer.Context,
    group: GroupArgument,
    record: Annotated[
        list[str] | None, typer.Option("--record", help="PARTITION:OFFSET (repeatable).")
    ] = None,
    partition: Annotated[int | None, typer.Option(min=0, help="A range's partition.")] = None,
    from_offset: Annotated[int | None, typer.Option("--from", min=0)] = None,
    to_offset: Annotated[int | None, typer.Option("--to", min=0)] = None,
    tenant: TenantOption = None,
    json: JsonOption = False,
) -> None:
    """Replay dead letters to the topics they came from: --record P:O ..., or --partition
    with --from and --to (inclusive)."""
    body: dict[str, Any] = {}
    if record:
        body["records"] = [_place(item) for item in record]
    for key, value in (("partition", partition), ("from_offset", from_offset),
                       ("to_offset", to_offset)):  # fmt: skip
        if value is not None:
            body[key] = value
    if tenant:
        body["tenant"] = tenant
    path = f"retry-policies/{quoted(group)}/dead-letters/replay"
    if tenant:
        path += f"?tenant={quoted(tenant)}"
    outcome = settings(ctx).api.post(path, body)
    if json:
        print_json(outcome)
        return
    for done in outcome["records"]:
        where = f"{done['partition']}:{done['offset']}"
        if done["skipped"]:
            stdout().print(f"skipped {where}: {done['skipped']}")
        else:
            stdout().print(
                f"replayed {where} to {done['topic']}-{done['to_partition']} "
                f"offset {done['to_offset']}"
            )
    stdout().print(f"{outcome['replayed']} replayed, {outcome['skipped']} skipped")


def _place(text: str) -> dict[str, int]:
    partition, _, offset = text.partition(":")
    if not (partition.isdigit() and offset.isdigit()):
        raise invalid(f"--record {text!r}: PARTITION:OFFSET")
    return {"partition": int(partition), "offset": int(offset)}
