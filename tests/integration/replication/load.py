"""Producers that write sequence-numbered records without pause and log every
acknowledgement: the fault test's record of what the cluster promised to keep.

``ProducerLoad(bootstrap, topic, partitions, acks="all").start()`` runs ``producers``
threads, each with its own SDK ``Producer`` (idempotent, so its own producer id), writing
records ``payload(i, seq)`` round-robin over the partitions at ``rate_per_s`` each, with at
most ``window`` records unacknowledged (a producer stalls rather than queueing without
bound while a partition has no leader). ``stop()`` stops sending and closes the producers,
waiting for every outstanding delivery to finish (acknowledged or failed).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from dataplane.client import Producer
from tests.integration.replication.verify import Ack, payload

PAD_BYTES = 64
CLOSE_TIMEOUT_S = 30.0


class ProducerLoad:
    """See the module docstring. ``acks`` and ``failures`` are read under ``lock``."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        acks: int | str = "all",
        producers: int = 2,
        rate_per_s: float = 150.0,
        window: int = 300,
        request_timeout_ms: float = 5_000,
    ) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.acks_setting = acks
        self.rate_per_s, self.window = rate_per_s, window
        self.request_timeout_ms = request_timeout_ms
        self.lock = threading.Lock()
        self.acks: dict[int, list[Ack]] = defaultdict(list)  # partition -> in ack order
        self.failures: list[tuple[bytes, str]] = []
        self.sent = 0
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"fault-producer-{i}", daemon=True)
            for i in range(producers)
        ]
        self._errors: list[BaseException] = []

    def start(self) -> ProducerLoad:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop sending; return once every producer is closed (its records delivered or
        failed). Raises what a producer thread raised."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(CLOSE_TIMEOUT_S + 10)
            assert not thread.is_alive(), f"{thread.name} did not stop"
        if self._errors:
            raise self._errors[0]

    # -- reading the log of acknowledgements --------------------------------------------
    def acked(self) -> dict[int, list[Ack]]:
        with self.lock:
            return {p: list(acks) for p, acks in self.acks.items()}

    def count(self) -> int:
        with self.lock:
            return sum(len(acks) for acks in self.acks.values())

    def first_ack_after(self, partition: int, since: float) -> float | None:
        """When the first record sent at or after ``since`` to ``partition`` was acked."""
        with self.lock:
            acks = self.acks.get(partition, [])
            first = None
            # Acks are appended in ack order, and a record sent after ``since`` is acked
            # after it: scanning back to the first ack before ``since`` sees them all.
            for ack in reversed(acks):
                if ack.acked_at < since:
                    break
                if ack.sent_at >= since and (first is None or ack.acked_at < first):
                    first = ack.acked_at
            return first

    # -- producing ------------------------------------------------------------------------
    def _run(self, index: int) -> None:
        try:
            self._produce(index)
        except BaseException as exc:  # reported by stop()
            self._errors.append(exc)

    def _produce(self, index: int) -> None:
        producer = Producer(
            self.bootstrap,
            client_id=f"fault-producer-{index}",
            acks=self.acks_setting,
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=self.request_timeout_ms,
            delivery_timeout_ms=CLOSE_TIMEOUT_S * 1000,
            retry_backoff_max_ms=500,
            max_block_ms=30_000,
        )
        window = threading.BoundedSemaphore(self.window)
        started, sequence = time.monotonic(), 0
        try:
            while not self._stopping.is_set():
                if not window.acquire(timeout=0.2):
                    continue
                value = payload(index, sequence, PAD_BYTES)
                partition = sequence % self.partitions
                callback = self._on_delivery(value, time.monotonic(), window)
                producer.send(self.topic, value, partition=partition, on_delivery=callback)
                sequence += 1
                with self.lock:
                    self.sent += 1
                ahead_s = started + sequence / self.rate_per_s - time.monotonic()
                if ahead_s > 0:
                    self._stopping.wait(ahead_s)
        finally:
            producer.close(CLOSE_TIMEOUT_S)

    def _on_delivery(self, value: bytes, sent_at: float, window: threading.BoundedSemaphore) -> Any:
        def delivered(error: Exception | None, metadata: Any) -> None:
            now = time.monotonic()
            with self.lock:
                if error is None:
                    ack = Ack(metadata.partition, metadata.offset, value, sent_at, now)
                    self.acks[metadata.partition].append(ack)
                else:
                    self.failures.append((value, f"{type(error).__name__}: {error}"))
            window.release()

        return delivered
