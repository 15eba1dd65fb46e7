"""``meridian produce --deliver-after`` and ``meridian delayed`` against a broker
process: scheduled lines print their ids, which the broker counts, lists and cancels;
a delay out of bounds is refused with nothing scheduled."""

from __future__ import annotations

import json

from tests.dataplane.cli.conftest import Cli


def test_scheduled_lines_are_counted_listed_and_cancelled(cli: Cli) -> None:
    cli.ok("topics", "create", "clid.orders", "--partitions", "2")
    cli.ok("topics", "create", "__delay.clid", "--partitions", "2",
           "--config", "retention_ms=-1", "--config", "retention_bytes=-1")  # fmt: skip
    result = cli.ok(
        "produce", "clid.orders", "--deliver-after", "3600", "--key-separator", ":",
        input="k1:remind me\nk2:and me\n",
    )  # fmt: skip
    ids = [line.split()[0] for line in result.stdout.splitlines()]
    assert len(ids) == 2
    assert all(i.startswith("clid.orders:") for i in ids)
    pending = json.loads(cli.ok("delayed", "pending", "clid", "--json").stdout)
    assert sum(p["pending_records"] for p in pending) == 2
    listed = json.loads(
        cli.ok("delayed", "list", "clid", "--topic", "clid.orders", "--json").stdout
    )
    assert sorted(r["id"] for r in listed) == sorted(ids)
    cancelled = cli.ok("delayed", "cancel", ids[0]).stdout
    assert cancelled.startswith(f"cancelled {ids[0]} (due ")
    table = cli.ok("delayed", "list", "clid").stdout
    assert ids[1] in table
    assert ids[0] not in table
    refused = cli("produce", "clid.orders", "--deliver-after", "0.5", input="x\n")
    assert refused.exit_code == 1
    assert "INVALID_DELAY" in refused.stderr
    missing = cli("delayed", "cancel", "clid.orders:0:999999")
    assert missing.exit_code == 1
    assert "DELAYED_RECORD_NOT_FOUND" in missing.stderr
    assert (
        sum(
            p["pending_records"]
            for p in json.loads(cli.ok("delayed", "pending", "clid", "--json").stdout)
        )
        == 1
    )
