"""``meridian groups``: list consumer groups; describe one with its lag per partition, in
records and in seconds."""

from __future__ import annotations

from typing import Annotated

import typer

from dataplane.cli.base import settings, stdout, table
from dataplane.client import Admin, TopicPartition
from dataplane.errors import ErrorCode, MeridianError


def list_groups(ctx: typer.Context) -> None:
    """List the consumer groups of the cluster."""
    with Admin(settings(ctx).bootstrap, client_id="meridian-cli", **settings(ctx).connect) as admin:
        groups = admin.list_groups()
    rows = sorted([g.group_id, g.state, g.protocol_type or "-"] for g in groups)
    stdout().print(table(None, ["group", "state", "protocol type"], rows))


def describe(ctx: typer.Context, group: Annotated[str, typer.Argument(help="Group id.")]) -> None:
    """Show GROUP's members and assignment, and per partition the committed offset, the
    end offset and the lag in records and in seconds (the age of the oldest record the
    group has not consumed; 0 when caught up)."""
    with Admin(settings(ctx).bootstrap, client_id="meridian-cli", **settings(ctx).connect) as admin:
        description = admin.describe_group(group)
        lags = admin.group_lag(group)
    if description.state == "Dead" and not description.members and not lags:
        raise MeridianError(ErrorCode.GROUP_ID_NOT_FOUND, f"no group {group!r}")
    out = stdout()
    out.print(
        f"group {description.group_id}: {description.state}, "
        f"protocol {description.protocol or '-'}, generation {description.generation_id}, "
        f"{len(description.members)} member(s)"
    )
    owners: dict[TopicPartition, str] = {}
    member_rows = []
    for member in description.members:
        for tp in member.assignment:
            owners[tp] = member.member_id
        assigned = ", ".join(f"{tp.topic}/{tp.partition}" for tp in sorted(member.assignment))
        member_rows.append([member.member_id, member.client_id, member.client_host, assigned])
    if member_rows:
        out.print(table("members", ["member", "client", "host", "assignment"], member_rows))
    rows = []
    for tp in sorted(set(lags) | set(owners)):
        lag = lags.get(tp)
        committed = lag.committed if lag is not None else None
        end = lag.end_offset if lag is not None else None
        seconds = lag.lag_seconds if lag is not None else None
        rows.append(
            [
                tp.topic,
                tp.partition,
                committed,
                end,
                lag.lag if lag else None,
                None if seconds is None else f"{seconds:.3f}",
                owners.get(tp),
            ]
        )
    headers = ["topic", "partition", "committed", "end offset", "lag", "lag s", "member"]
    out.print(table("offsets", headers, rows))
