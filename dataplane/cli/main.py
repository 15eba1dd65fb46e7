"""The ``meridian`` application: global options and the command tree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from dataplane.cli import groups, topics
from dataplane.cli.base import DEFAULT_BOOTSTRAP, Settings, reporting
from dataplane.cli.consume import consume
from dataplane.cli.offsets import offsets
from dataplane.cli.produce import produce

app = typer.Typer(
    name="meridian",
    help="Produce, consume and inspect topics and consumer groups of a Meridian cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
topics_app = typer.Typer(help="List, create, describe and delete topics.", no_args_is_help=True)
groups_app = typer.Typer(help="List and describe consumer groups.", no_args_is_help=True)


@app.callback()
def options(
    ctx: typer.Context,
    bootstrap: Annotated[
        str,
        typer.Option(
            "--bootstrap",
            "-b",
            envvar="MERIDIAN_BOOTSTRAP",
            help="Broker addresses, host:port[,host:port...].",
        ),
    ] = DEFAULT_BOOTSTRAP,
) -> None:
    ctx.obj = Settings(bootstrap)


app.command("produce")(reporting(produce))
app.command("consume")(reporting(consume))
app.command("offsets")(reporting(offsets))
topics_app.command("list")(reporting(topics.list_topics))
topics_app.command("create")(reporting(topics.create))
topics_app.command("describe")(reporting(topics.describe))
topics_app.command("delete")(reporting(topics.delete))
groups_app.command("list")(reporting(groups.list_groups))
groups_app.command("describe")(reporting(groups.describe))
app.add_typer(topics_app, name="topics")
app.add_typer(groups_app, name="groups")


def main(argv: Sequence[str] | None = None) -> None:
    """The console-script entry point."""
    app(args=list(argv) if argv is not None else None, prog_name="meridian")
