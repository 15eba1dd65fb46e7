"""A noisy tenant for the noisy-neighbour test, run as its own process:

    python -m tests.dataplane.broker.noisy_producer BOOTSTRAP TOPIC PRODUCERS RECORD_BYTES

``PRODUCERS`` SDK producers (one thread each, partition i for producer i) send records
of ``RECORD_BYTES`` as fast as their buffers take them, until stdin closes. Every 100 ms
it prints one JSON line: ``{"t": <time.monotonic()>, "acked": <record bytes
acknowledged so far>, "sent": <record bytes handed to send()>}`` (``CLOCK_MONOTONIC`` is
system-wide, so the test compares it with its own clock).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from dataplane.client import MeridianError, Producer

BATCH_BYTES = 64 * 1024
BUFFER_BYTES = 1024 * 1024  # small: once full, send() blocks instead of burning CPU


class Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked = 0
        self.sent = 0
        self.failed = 0

    def delivered(self, size: int) -> Any:
        def callback(error: Exception | None, _metadata: Any) -> None:
            with self.lock:
                if error is None:
                    self.acked += size
                else:
                    self.failed += 1

        return callback


def produce(producer: Producer, topic: str, partition: int, size: int, counters: Counters,
            stop: threading.Event) -> None:  # fmt: skip
    value = b"n" * size
    callback = counters.delivered(size)
    while not stop.is_set():
        try:
            producer.send(topic, value, partition=partition, on_delivery=callback)
        except MeridianError:
            return  # closed while blocked on a full buffer: the run is over
        with counters.lock:
            counters.sent += size


def main(argv: list[str]) -> None:
    bootstrap, topic, producers, size = argv[0], argv[1], int(argv[2]), int(argv[3])
    counters, stop = Counters(), threading.Event()
    clients = [
        Producer(bootstrap, linger_ms=5, batch_bytes=BATCH_BYTES, buffer_memory=BUFFER_BYTES)
        for _ in range(producers)
    ]
    threads = [
        threading.Thread(target=produce, args=(c, topic, i, size, counters, stop), daemon=True)
        for i, c in enumerate(clients)
    ]
    for thread in threads:
        thread.start()
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    while not closed.wait(0.1):
        with counters.lock:
            line = {"t": time.monotonic(), "acked": counters.acked, "sent": counters.sent,
                    "failed": counters.failed}  # fmt: skip
        print(json.dumps(line), flush=True)
    stop.set()
    for client in clients:
        client.close(0)


if __name__ == "__main__":
    main(sys.argv[1:])
