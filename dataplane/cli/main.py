"""The ``meridian`` application: global options and the command tree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from dataplane.cli import (
    databus,
    delays,
    exports,
    groups,
    indexes,
    lanes,
    mirrors,
    topics,
    transactions,
)
from dataplane.cli.api import DEFAULT_API_URL
from dataplane.cli.base import DEFAULT_BOOTSTRAP, Settings, credentials_from, fail, reporting
from dataplane.cli.consume import consume
from dataplane.cli.offsets import offsets
from dataplane.cli.produce import produce
from dataplane.errors import MeridianError

app = typer.Typer(
    name="meridian",
    help=(
        "Produce, consume and inspect topics, consumer groups and transactions of a Meridian "
        "cluster; "
        "manage a tenant's lanes, Databus configurations, Parquet exports, indexes and "
        "mirror links."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
topics_app = typer.Typer(
    help="List, create, alter, describe and delete topics.", no_args_is_help=True
)
groups_app = typer.Typer(
    help="List and describe consumer groups; fail one over to another region of a mirror.",
    no_args_is_help=True,
)
lanes_app = typer.Typer(
    help="List, create, describe and delete a tenant's lanes (the control plane's REST API).",
    no_args_is_help=True,
)
databus_app = typer.Typer(
    help="A tenant's Databus configurations and the agents running them (the control "
    "plane's REST API).",
    no_args_is_help=True,
)
exports_app = typer.Typer(
    help="Create, list, describe, run and delete a tenant's Parquet exports (the control "
    "plane's REST API).",
    no_args_is_help=True,
)
indexes_app = typer.Typer(
    help="Create, list, describe, build and delete a tenant's secondary indexes (the "
    "control plane's REST API).",
    no_args_is_help=True,
)
mirrors_app = typer.Typer(
    help="Create, list, describe, pause, resume and delete a tenant's mirror links (topics "
    "copied between regions; the control plane's REST API).",
    no_args_is_help=True,
)
index_app = typer.Typer(help="Query a secondary index.", no_args_is_help=True)
delayed_app = typer.Typer(
    help="Delayed records: what waits, and cancelling (the brokers).", no_args_is_help=True
)
dlq_app = typer.Typer(
    help="Consumer groups' dead letters: list, show, replay (the REST API).",
    no_args_is_help=True,
)
retry_policies_app = typer.Typer(
    help="Consumer groups' retry policies (the REST API).", no_args_is_help=True
)
databus_configs_app = typer.Typer(
    help="List, describe, apply (create or update from a JSON file) and delete Databus "
    "configurations.",
    no_args_is_help=True,
)


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
    token: Annotated[
        str | None,
        typer.Option(envvar="MERIDIAN_TOKEN", help="Bearer token for the brokers."),
    ] = None,
    token_url: Annotated[
        str | None,
        typer.Option(
            envvar="MERIDIAN_TOKEN_URL",
            help="Token endpoint for client credentials (with --client-id/--client-secret).",
        ),
    ] = None,
    client_id: Annotated[
        str | None, typer.Option(envvar="MERIDIAN_CLIENT_ID", help="Service account client id.")
    ] = None,
    client_secret: Annotated[
        str | None,
        typer.Option(envvar="MERIDIAN_CLIENT_SECRET", help="Service account client secret."),
    ] = None,
    tls_ca: Annotated[
        str | None,
        typer.Option(envvar="MERIDIAN_TLS_CA", help="CA file: reach the brokers over TLS."),
    ] = None,
    api: Annotated[
        str,
        typer.Option(
            "--api",
            envvar="MERIDIAN_API_URL",
            help="The control plane's REST API, http(s)://host:port (lanes, databus, "
            "exports, indexes, mirrors).",
        ),
    ] = DEFAULT_API_URL,
) -> None:
    try:
        credentials = credentials_from(token, token_url, client_id, client_secret)
    except MeridianError as exc:
        fail(exc)
    ctx.obj = Settings(bootstrap, credentials, tls_ca, api)


app.command("produce")(reporting(produce))
app.command("consume")(reporting(consume))
app.command("offsets")(reporting(offsets))
topics_app.command("list")(reporting(topics.list_topics))
topics_app.command("create")(reporting(topics.create))
topics_app.command("alter")(reporting(topics.alter))
topics_app.command("describe")(reporting(topics.describe))
topics_app.command("delete")(reporting(topics.delete))
groups_app.command("list")(reporting(groups.list_groups))
groups_app.command("describe")(reporting(groups.describe))
groups_app.command("failover")(reporting(mirrors.failover_group))
app.add_typer(topics_app, name="topics")
lanes_app.command("list")(reporting(lanes.list_lanes))
lanes_app.command("create")(reporting(lanes.create))
lanes_app.command("describe")(reporting(lanes.describe))
lanes_app.command("delete")(reporting(lanes.delete))
app.add_typer(groups_app, name="groups")
app.add_typer(lanes_app, name="lanes")
databus_configs_app.command("list")(reporting(databus.list_configs))
databus_configs_app.command("describe")(reporting(databus.describe))
databus_configs_app.command("apply")(reporting(databus.apply))
databus_configs_app.command("delete")(reporting(databus.delete))
databus_app.add_typer(databus_configs_app, name="configs")
databus_app.command("agents")(reporting(databus.list_agents))
app.add_typer(databus_app, name="databus")
exports_app.command("list")(reporting(exports.list_exports))
exports_app.command("create")(reporting(exports.create))
exports_app.command("describe")(reporting(exports.describe))
exports_app.command("run")(reporting(exports.run))
exports_app.command("delete")(reporting(exports.delete))
app.add_typer(exports_app, name="exports")
indexes_app.command("list")(reporting(indexes.list_indexes))
indexes_app.command("create")(reporting(indexes.create))
indexes_app.command("describe")(reporting(indexes.describe))
indexes_app.command("build")(reporting(indexes.build))
indexes_app.command("delete")(reporting(indexes.delete))
app.add_typer(indexes_app, name="indexes")
index_app.command("query")(reporting(indexes.query))
app.add_typer(index_app, name="index")
mirrors_app.command("list")(reporting(mirrors.list_mirrors))
mirrors_app.command("create")(reporting(mirrors.create))
mirrors_app.command("describe")(reporting(mirrors.describe))
mirrors_app.command("pause")(reporting(mirrors.pause))
mirrors_app.command("resume")(reporting(mirrors.resume))
mirrors_app.command("delete")(reporting(mirrors.delete))
app.add_typer(mirrors_app, name="mirrors")
delayed_app.command("pending")(reporting(delays.pending))
delayed_app.command("list")(reporting(delays.list_delayed))
delayed_app.command("cancel")(reporting(delays.cancel))
app.add_typer(delayed_app, name="delayed")
dlq_app.command("list")(reporting(delays.list_dead_letters))
dlq_app.command("show")(reporting(delays.show_dead_letter))
dlq_app.command("replay")(reporting(delays.replay))
app.add_typer(dlq_app, name="dlq")
retry_policies_app.command("list")(reporting(delays.list_policies))
retry_policies_app.command("create")(reporting(delays.create_policy))
retry_policies_app.command("describe")(reporting(delays.describe_policy))
retry_policies_app.command("delete")(reporting(delays.delete_policy))
app.add_typer(retry_policies_app, name="retry-policies")
app.add_typer(transactions.app, name="transactions")
app.add_typer(transactions.half_app, name="half-messages")


def main(argv: Sequence[str] | None = None) -> None:
    """The console-script entry point."""
    app(args=list(argv) if argv is not None else None, prog_name="meridian")
