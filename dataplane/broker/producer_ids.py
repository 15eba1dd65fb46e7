"""Producer ids that never repeat, even across restarts.

An id is ``broker_id << COUNTER_BITS | counter``: the broker id in the high bits keeps
brokers apart without coordination. Counters are reserved in blocks of ``BLOCK_SIZE``;
the end of the reserved block is written durably to ``<data dir>/producer-ids.json``
before any id of it is handed out, so after a crash the next block starts past every id
that may have been given. A data directory without that file (a new broker, or one
whose volume was lost) starts its counter at the milliseconds since ``COUNTER_EPOCH_MS``
(2025-01-01), not at 0: so a broker that lost its volume hands out none of the ids its
earlier life gave — as long as that life gave fewer than one id a millisecond on
average — and no producer state left on the partitions mistakes a new producer for an
old one. The counter's 40 bits last until 2059.

Thread safety: ``next_id`` may be called from any thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from dataplane.errors import ErrorCode, MeridianError
from dataplane.files import replace_file
from dataplane.storage.log import wall_clock_ms

COUNTER_BITS = 40
COUNTER_EPOCH_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
BLOCK_SIZE = 1000
STATE_FILE = "producer-ids.json"
MAX_EPOCH = 2**15 - 1


class ProducerIdAllocator:
    def __init__(
        self, data_dir: Path, broker_id: int, clock_ms: Callable[[], int] = wall_clock_ms
    ) -> None:
        self._path = Path(data_dir) / STATE_FILE
        self._broker_id = broker_id
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._next = self._reserved_end = self._load()

    def _load(self) -> int:
        try:
            return int(json.loads(self._path.read_bytes())["next_block"])
        except FileNotFoundError:
            return max(0, self._clock_ms() - COUNTER_EPOCH_MS)  # see the module docstring
        except (ValueError, KeyError, TypeError) as exc:
            # Guessing could hand out an id twice: refuse to start instead.
            raise MeridianError(
                ErrorCode.STORAGE_ERROR, f"unreadable producer id state {self._path}: {exc}"
            ) from exc

    def next_id(self) -> int:
        """A producer id no one got before from this data directory."""
        with self._lock:
            if self._next >= self._reserved_end:
                self._reserve(self._next + BLOCK_SIZE)
            counter, self._next = self._next, self._next + 1
        return self._broker_id << COUNTER_BITS | counter

    def _reserve(self, end: int) -> None:
        if end >= 1 << COUNTER_BITS:
            raise MeridianError(ErrorCode.UNKNOWN_SERVER_ERROR, "producer ids are exhausted")
        replace_file(self._path, json.dumps({"next_block": end}).encode())
        self._reserved_end = end

    def init_producer(self, producer_id: int, epoch: int) -> tuple[int, int]:
        """(id, epoch) for an InitProducerId call: a new id for ``producer_id < 0``;
        otherwise the same id with the next epoch (a new id once epochs run out)."""
        if producer_id < 0:
            return self.next_id(), 0
        if epoch < 0:
            raise MeridianError(
                ErrorCode.INVALID_REQUEST, "bumping the epoch of a producer id needs its epoch"
            )
        if epoch >= MAX_EPOCH:
            return self.next_id(), 0
        return producer_id, epoch + 1
