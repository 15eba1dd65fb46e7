"""``meridian offsets``: the earliest, latest or by-time offsets of a topic's partitions."""

from __future__ import annotations

from typing import Annotated

import typer

from dataplane.cli.base import settings, stdout, table
from dataplane.client import Admin, TopicPartition


def parse_time(value: str) -> str | int:
    """``earliest``, ``latest`` or a timestamp in ms since the epoch."""
    if value in ("earliest", "latest"):
        return value
    try:
        stamp = int(value)
    except ValueError:
        stamp = -1
    if stamp < 0:
        raise typer.BadParameter("use earliest, latest or a timestamp in ms (>= 0)")
    return stamp


def offsets(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    time: Annotated[
        str,
        typer.Option(
            "--time",
            "-t",
            help="earliest (log start), latest (high watermark) or a time in ms: the first "
            "offset at or after it.",
        ),
    ] = "latest",
) -> None:
    """Print the offset of each partition of TOPIC at --time."""
    spec = parse_time(time)
    with Admin(settings(ctx).bootstrap, client_id="meridian-cli", **settings(ctx).connect) as admin:
        partitions = admin.metadata.partitions_for(topic)
        found = admin.list_offsets({TopicPartition(topic, p): spec for p in partitions})
    rows = []
    for tp, (offset, stamp) in sorted(found.items()):
        rows.append([tp.partition, offset if offset >= 0 else "none", stamp if stamp >= 0 else "-"])
    stdout().print(table(None, ["partition", "offset", "timestamp"], rows))
