"""The demo's steady traffic, so the console's rate and lag charts move: a light producer
(about 20 records/s) and a slower consumer group ``<tenant>.analytics`` (about 12
records/s, committing as it goes), whose lag grows until the demo stops. The producer
also writes one record in ``HISTORY_EVERY`` to the tiered history topic, so its segments
are sealed (by age) and uploaded.

Runs in daemon threads of the demo process, as the demo's service account; a failure
(a broker restarting) is printed once and retried after a pause.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

_stopping = threading.Event()
_threads: list[threading.Thread] = []
STOP_WAIT_S = 5.0
PRODUCE_PER_S = 20
CONSUME_PER_S = 12
RETRY_PAUSE_S = 5.0
HISTORY_EVERY = 5


def start_traffic(
    bootstrap: str, api_url: str, account: dict[str, Any], topic: str, history: str = ""
) -> None:
    """Start the producer and the consumer threads (they stop with the process); the
    producer writes to ``history`` too, when given."""
    from dataplane.client.auth import ClientCredentials

    credentials = ClientCredentials(
        api_url + "/api/v1/auth/token", account["client_id"], account["client_secret"]
    )
    group = topic.partition(".")[0] + ".analytics"
    for name, loop in (("produce", _produce), ("consume", _consume)):
        thread = threading.Thread(
            target=_forever,
            args=(name, loop, bootstrap, credentials, topic, group, history),
            name=f"demo-traffic-{name}",
            daemon=True,
        )
        thread.start()
        _threads.append(thread)


def stop_traffic() -> None:
    """Stop the threads (before the brokers stop, so they do not retry meanwhile)."""
    _stopping.set()
    for thread in _threads:
        thread.join(timeout=STOP_WAIT_S)


def _forever(name: str, loop: Any, *args: Any) -> None:
    while not _stopping.is_set():
        try:
            loop(*args)
        except Exception as exc:  # a broker restarting: say so, pause, go on
            print(f"==> demo traffic ({name}): {exc}; retrying", flush=True)
            _stopping.wait(RETRY_PAUSE_S)


def _produce(bootstrap: str, credentials: Any, topic: str, group: str, history: str) -> None:
    from dataplane.client import Producer

    with Producer(bootstrap, credentials=credentials) as producer:
        sent = 0
        while not _stopping.is_set():
            producer.send(topic, value=f"event-{sent}".encode(), key=f"k{sent % 31}".encode())
            if history and sent % HISTORY_EVERY == 0:
                body = {"event": sent, "user": sent % 7, "at": round(time.time(), 3)}
                producer.send(history, value=json.dumps(body).encode())
            sent += 1
            _stopping.wait(1 / PRODUCE_PER_S)


def _consume(bootstrap: str, credentials: Any, topic: str, group: str, history: str) -> None:
    from dataplane.client import Consumer

    with Consumer(
        bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        max_poll_records=CONSUME_PER_S,
        credentials=credentials,
    ) as consumer:
        consumer.subscribe([topic])
        while not _stopping.is_set():
            started = time.monotonic()
            if consumer.poll(timeout_ms=500):
                consumer.commit()
            _stopping.wait(max(0.0, 1.0 - (time.monotonic() - started)))
