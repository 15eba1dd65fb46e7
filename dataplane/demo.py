"""The platform on one machine: ``./dev run``.

Starts a cluster of local broker processes (``dataplane.local``), creates a topic,
produces keyed records through the SDK producer, consumes them with a consumer group,
shows the group's lag, and prints the commands to try next. The brokers keep running
until Ctrl-C (or exit at once with ``--exit``); their data stays in ``--data-dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import tempfile
import threading
import time
from pathlib import Path

from dataplane.client import Admin, Consumer, Producer
from dataplane.local import LocalCluster

TOPIC = "demo.orders"
GROUP = "demo.billing"


def _produce(bootstrap: str, count: int) -> None:
    started = time.perf_counter()
    with Producer(bootstrap, client_id="demo-producer", linger_ms=5) as producer:
        futures = [
            producer.send(
                TOPIC,
                json.dumps({"order": n, "qty": 1 + n % 5}).encode(),
                key=f"customer-{n % 23}".encode(),
                headers=[("x-trace-id", f"{n:08x}".encode())],
            )
            for n in range(count)
        ]
        producer.flush()
        last = futures[-1].result()
    took = time.perf_counter() - started
    print(f"produced {count} records in {took:.2f} s; the last went to {last}")


def _consume(bootstrap: str, count: int) -> None:
    seen: dict[int, int] = {}
    with Consumer(
        bootstrap, group_id=GROUP, auto_offset_reset="earliest", client_id="demo-consumer"
    ) as consumer:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while sum(seen.values()) < count and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=500):
                seen[record.partition] = seen.get(record.partition, 0) + 1
        consumer.commit()
    by_partition = dict(sorted(seen.items()))
    print(f"group {GROUP} consumed {sum(seen.values())} records; by partition: {by_partition}")


def _show_lag(admin: Admin) -> None:
    for tp, lag in sorted(admin.group_lag(GROUP).items()):
        where = f"{tp.topic}/{tp.partition}"
        print(f"  {where}: committed {lag.committed}, end {lag.end_offset}, lag {lag.lag}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, help="where the brokers keep their data")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--exit", action="store_true", help="stop the brokers after the tour")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="meridian-"))
    cluster = LocalCluster(data_dir, args.brokers)
    print(f"starting {args.brokers} brokers under {data_dir} ...")
    with cluster:
        bootstrap = cluster.bootstrap
        print(f"brokers ready: {bootstrap}")
        with Admin(bootstrap) as admin:
            admin.create_topic(TOPIC, 6)
            print(f"topic {TOPIC}: 6 partitions over {args.brokers} brokers")
            _produce(bootstrap, args.records)
            _consume(bootstrap, args.records)
            print(f"lag of group {GROUP}:")
            _show_lag(admin)
        print(
            "\ntry:\n"
            f"  export MERIDIAN_BOOTSTRAP={bootstrap}\n"
            f"  .venv/bin/meridian topics describe {TOPIC}\n"
            f"  echo hello | .venv/bin/meridian produce {TOPIC}\n"
            f"  .venv/bin/meridian consume {TOPIC} --from-beginning --max-messages 5\n"
            f"  .venv/bin/meridian groups describe {GROUP}\n"
        )
        if not args.exit:
            print("brokers keep running; Ctrl-C stops them")
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
    print("brokers stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
