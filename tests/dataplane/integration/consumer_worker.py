"""A group consumer in its own process, for kill tests.

    python -m tests.dataplane.integration.consumer_worker BOOTSTRAP TOPIC GROUP OUT_FILE

Consumes with manual commits: after each poll it appends ``partition offset`` of every
record to OUT_FILE (fsynced), then commits synchronously and appends ``commit`` lines
with the committed positions. It prints ``assigned <partitions>`` whenever its assignment
changes, and runs until killed.
"""

from __future__ import annotations

import os
import sys

from dataplane.client import Consumer


def main(bootstrap: str, topic: str, group: str, out_path: str) -> None:
    consumer = Consumer(
        bootstrap,
        group_id=group,
        client_id="worker",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        max_poll_records=50,
    )
    consumer.subscribe([topic])
    last: frozenset[object] = frozenset()
    with open(out_path, "a", buffering=1) as out:
        while True:
            records = consumer.poll(timeout_ms=200)
            assignment = frozenset(consumer.assignment())
            if assignment != last:
                last = assignment
                print("assigned", sorted(tp.partition for tp in assignment), flush=True)
            if not records:
                continue
            for record in records:
                out.write(f"{record.partition} {record.offset}\n")
            out.flush()
            os.fsync(out.fileno())
            consumer.commit()
            positions = {tp.partition: consumer.position(tp) for tp in assignment}
            out.write("".join(f"commit {p} {o}\n" for p, o in sorted(positions.items())))
            out.flush()
            os.fsync(out.fileno())


if __name__ == "__main__":
    main(*sys.argv[1:5])
