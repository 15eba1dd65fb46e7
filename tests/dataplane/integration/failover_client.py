"""An SDK producer and consumer in their own process, for failover tests that judge what
a user sees on its stderr.

    python -m tests.dataplane.integration.failover_client BOOTSTRAP TOPIC OUT_DIR [TOKEN]

An idempotent ``acks="all"`` producer sends ``v<n>`` records, 50 at a time, and appends
``<value> <partition> <offset>`` to ``OUT_DIR/acked`` for each acknowledged one (a
failure goes to ``OUT_DIR/failed``); a consumer assigned every partition reads from the
earliest offset. The process runs until ``OUT_DIR/stop`` exists, then closes the
producer, reads on until the consumer has seen every acknowledged record (or 60 s
pass), closes the consumer, writes ``OUT_DIR/consumed`` (one value a line) and exits.
``TOKEN``, if given, is sent as a bearer token (the asyncio channels then run through
interceptors).

Nothing here configures logging: what reaches stderr is what an application that leaves
logging alone would print.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from dataplane.client import Consumer, Producer, TopicPartition
from dataplane.errors import MeridianError

PER_ROUND = 50
DRAIN_S = 60.0


def produce(producer: Producer, topic: str, out: Path, stop: Path) -> None:
    n = 0
    with (out / "acked").open("a", buffering=1) as acked, (out / "failed").open("a") as failed:
        while not stop.exists():
            sent = []
            for _ in range(PER_ROUND):
                value = b"v%d" % n
                sent.append((value, producer.send(topic, value, key=value)))
                n += 1
            for value, future in sent:
                try:
                    meta = future.result(timeout=180)
                except MeridianError as error:
                    failed.write(f"{value.decode()} {error!r}\n")
                    continue
                acked.write(f"{value.decode()} {meta.partition} {meta.offset}\n")


def consume(consumer: Consumer, seen: set[bytes], done: threading.Event) -> None:
    while not done.is_set():
        for record in consumer.poll(timeout_ms=200):
            seen.add(record.value or b"")


def acked_values(out: Path) -> set[bytes]:
    lines = (out / "acked").read_text().splitlines()
    return {line.split()[0].encode() for line in lines}


def main(bootstrap: str, topic: str, out_dir: str, token: str | None = None) -> None:
    out = Path(out_dir)
    producer = Producer(
        bootstrap,
        acks="all",
        linger_ms=2,
        request_timeout_ms=10_000,
        delivery_timeout_ms=120_000,
        credentials=token,
    )
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", credentials=token)
    consumer.assign([TopicPartition(topic, p) for p in producer.partitions_for(topic)])
    seen: set[bytes] = set()
    done = threading.Event()
    reader = threading.Thread(target=consume, args=(consumer, seen, done))
    reader.start()
    produce(producer, topic, out, out / "stop")
    producer.close()
    deadline = time.monotonic() + DRAIN_S
    while not acked_values(out) <= seen and time.monotonic() < deadline:
        time.sleep(0.2)
    done.set()
    reader.join()
    consumer.close()
    (out / "consumed").write_text("".join(f"{v.decode()}\n" for v in sorted(seen)))


if __name__ == "__main__":
    main(*sys.argv[1:5])
