"""``meridian transactions`` and ``meridian half-messages``: a tenant's transactional ids
and half messages at the brokers' transaction coordinators.

    meridian transactions list [--state ongoing]      # state, partitions, age
    meridian transactions describe acme.loader
    meridian transactions abort acme.loader           # a hanging one; fences its producer
    meridian transactions producers acme.orders 0     # a partition's producers, open txns
    meridian transactions abort-producer acme.orders 0 4711  # an abort marker there
    meridian half-messages list [--group acme.payments]
    meridian half-messages commit acme.payments 3e8    # decide one as an operator
    meridian half-messages rollback acme.payments 3e8
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from dataplane.cli.base import reporting, settings, stdout, table
from dataplane.client import Admin
from dataplane.client.txn_admin import STATES, TransactionListing
from dataplane.client.types import TopicPartition

app = typer.Typer(
    help="List and describe transactional ids and their open transactions; abort a "
    "hanging one (fencing its producer).",
    no_args_is_help=True,
)
half_app = typer.Typer(
    help="List half messages (pending and recently decided); commit or roll one back.",
    no_args_is_help=True,
)


def _admin(ctx: typer.Context) -> Admin:
    return Admin(settings(ctx).bootstrap, client_id="meridian-cli", **settings(ctx).connect)


def _age(start_ms: int) -> str:
    return "-" if start_ms < 0 else f"{max(0.0, time.time() - start_ms / 1000):.1f}"


def _partitions(listing: TransactionListing) -> str:
    return ", ".join(f"{tp.topic}/{tp.partition}" for tp in listing.partitions) or "-"


@app.command("list")
@reporting
def list_transactions(
    ctx: typer.Context,
    state: Annotated[
        list[str] | None,
        typer.Option("--state", help=f"Only these states: {', '.join(STATES.values())}."),
    ] = None,
) -> None:
    """List the transactional ids you may see, with their open transaction's age."""
    for wanted in state or []:
        if wanted not in STATES.values():
            raise typer.BadParameter(f"{wanted!r} is none of {', '.join(STATES.values())}")
    with _admin(ctx) as admin:
        found = admin.list_transactions(state or ())
    rows = [
        [
            t.transactional_id,
            t.state,
            t.producer_id,
            t.producer_epoch,
            _age(t.start_ms),
            _partitions(t),
        ]
        for t in found
    ]
    headers = ["transactional id", "state", "producer id", "epoch", "age s", "partitions"]
    stdout().print(table(None, headers, rows))


@app.command("describe")
@reporting
def describe(
    ctx: typer.Context, transactional_id: Annotated[str, typer.Argument(help="Transactional id.")]
) -> None:
    """Show a transactional id: its producer, state, timeout and open transaction."""
    with _admin(ctx) as admin:
        t = admin.describe_transaction(transactional_id)
    stdout().print(
        f"{t.transactional_id}: {t.state}, producer {t.producer_id} epoch {t.producer_epoch}, "
        f"timeout {t.timeout_ms} ms, coordinator broker {t.coordinator_id}\n"
        f"open for {_age(t.start_ms)} s on {_partitions(t)}"
    )


@app.command("abort")
@reporting
def abort(
    ctx: typer.Context, transactional_id: Annotated[str, typer.Argument(help="Transactional id.")]
) -> None:
    """Abort the transactional id's open transaction: nothing of it becomes visible, and
    its producer is fenced (it must start again with init_transactions)."""
    with _admin(ctx) as admin:
        after = admin.abort_transaction(transactional_id)
    stdout().print(
        f"{after.transactional_id}: {after.state}, producer epoch {after.producer_epoch}"
    )


@app.command("producers")
@reporting
def producers(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic.")],
    partition: Annotated[int, typer.Argument(help="Partition.", min=0)],
) -> None:
    """List a partition's producers at its leader, with where their open transaction
    there began (Kafka's kafka-transactions describe-producers)."""
    with _admin(ctx) as admin:
        found = admin.describe_producers(TopicPartition(topic, partition))
    rows = [
        [
            p.producer_id,
            p.producer_epoch,
            p.last_sequence,
            "-" if p.txn_first_offset < 0 else p.txn_first_offset,
            p.coordinator_epoch,
        ]
        for p in found
    ]
    headers = ["producer id", "epoch", "last sequence", "open txn from", "coordinator epoch"]
    stdout().print(table(None, headers, rows))


@app.command("abort-producer")
@reporting
def abort_producer(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic.")],
    partition: Annotated[int, typer.Argument(help="Partition.", min=0)],
    producer_id: Annotated[int, typer.Argument(help="Producer id (see producers).", min=0)],
) -> None:
    """Write an abort marker for a producer's transaction hanging on one partition, one
    its coordinator cannot end (Kafka's kafka-transactions --abort): its records there
    are never read by read_committed consumers, and the partition's last stable offset
    moves on."""
    with _admin(ctx) as admin:
        first = admin.abort_producer(TopicPartition(topic, partition), producer_id)
    stdout().print(
        f"{topic}/{partition}: aborted producer {producer_id}'s transaction from offset {first}"
    )


@half_app.command("list")
@reporting
def list_half_messages(
    ctx: typer.Context,
    group: Annotated[str | None, typer.Option("--group", "-g", help="Producer group.")] = None,
) -> None:
    """List half messages: pending ones with their check-backs, and recently decided ones
    with who decided them."""
    with _admin(ctx) as admin:
        found = admin.list_half_messages(group)
    rows = [
        [
            h.producer_group,
            h.half_id,
            f"{h.topic}/{h.partition}",
            h.state,
            _age(h.created_ms),
            f"{h.checks}/{h.max_checks}",
            h.default_outcome,
            h.resolved_by or "-",
        ]
        for h in found
    ]
    headers = ["group", "half id", "partition", "state", "age s", "checks", "default", "decided by"]
    stdout().print(table(None, headers, rows))


def _resolve(ctx: typer.Context, group: str, half_id: str, *, commit: bool) -> None:
    with _admin(ctx) as admin:
        state = admin.resolve_half_message(group, half_id, commit=commit)
    stdout().print(f"{group} {half_id}: {state}")


@half_app.command("commit")
@reporting
def commit(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="Producer group.")],
    half_id: Annotated[str, typer.Argument(help="Half message id.")],
) -> None:
    """Commit a pending half message as an operator: consumers see it."""
    _resolve(ctx, group, half_id, commit=True)


@half_app.command("rollback")
@reporting
def rollback(
    ctx: typer.Context,
    group: Annotated[str, typer.Argument(help="Producer group.")],
    half_id: Annotated[str, typer.Argument(help="Half message id.")],
) -> None:
    """Roll back a pending half message as an operator: no consumer ever sees it."""
    _resolve(ctx, group, half_id, commit=False)
