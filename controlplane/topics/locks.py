"""One reconcile run per topic at a time: ``topic_lock(topic_id)``; the same lock, in
another namespace, for any object whose runs must never overlap (``object_lock``: one
export run per export, one build per index).

``reconcile_topic`` holds the lock for its whole run (reading the desired state, the
broker calls, the status write) and the drift pass holds it while it heals one topic's
partitions, so two runs of one topic never interleave their broker calls: a run that
raced a delete cannot re-create a partition after the delete removed it, and an older
generation's config cannot reach a broker after a newer generation was marked ready.

- Postgres: a session-level advisory lock in the two-key space
  (``pg_try_advisory_lock(NAMESPACE, topic id)``; the controller's region leases use the
  one-key space, which never overlaps it). It is taken on the *calling thread's* Django
  connection (Django gives each thread its own), so it is held by that thread's session
  and released with ``pg_advisory_unlock`` in ``finally``, or by Postgres when the
  session ends (a worker that dies frees its topics). ``pg_try_advisory_lock`` is polled
  for at most ``wait_s``: a run never queues behind another indefinitely.
- SQLite (the embedded demo only: one worker process with a thread pool): a
  process-local ``threading.RLock`` per topic id is enough, since no other process
  reconciles topics of that database.

Both are re-entrant for the holder (a Postgres session, a thread), never across
holders. A lock not obtained within ``wait_s`` raises ``TopicBusy``, which is transient:
the Celery task retries it later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection

from controlplane.core.errors import Unavailable

log = logging.getLogger(__name__)

# classid of the two-key advisory lock space ("MT": Meridian topics).
NAMESPACE = 0x4D54
# How long a run waits for another run of the same topic before giving up (and retrying).
DEFAULT_WAIT_S = 5.0
_POLL_S = 0.05

_local_locks: dict[tuple[int, int], threading.RLock] = {}
_local_guard = threading.Lock()


class TopicBusy(Unavailable):
    """Another reconcile run of the topic holds its lock; retry later."""

    code = "topic_busy"

    def __init__(self, topic_id: int) -> None:
        super().__init__(f"topic {topic_id} is being reconciled by another run", topic_id=topic_id)
        self.topic_id = topic_id


def _objid(object_id: int) -> int:
    """``object_id`` as a signed 32-bit key. Ids past 2**32 share keys with lower ones;
    such a collision only serializes two objects' runs, it never lets two of one run."""
    return (object_id + 2**31) % 2**32 - 2**31


@contextmanager
def topic_lock(topic_id: int, *, wait_s: float = DEFAULT_WAIT_S) -> Iterator[None]:
    """Hold topic ``topic_id``'s reconcile lock for the ``with`` block (see the module
    docstring). Raises ``TopicBusy`` when it is not free within ``wait_s`` seconds."""
    with object_lock(NAMESPACE, topic_id, lambda: TopicBusy(topic_id), wait_s=wait_s):
        yield


@contextmanager
def object_lock(
    namespace: int,
    object_id: int,
    busy: Callable[[], Exception],
    *,
    wait_s: float = DEFAULT_WAIT_S,
) -> Iterator[None]:
    """Hold the lock of ``object_id`` in ``namespace`` (a 16-bit classid of its own per
    kind of object) for the ``with`` block, as ``topic_lock`` does; raises ``busy()``
    when it is not free within ``wait_s`` seconds."""
    if connection.vendor == "postgresql":
        with _advisory_lock(namespace, object_id, wait_s, busy):
            yield
    else:
        with _local_lock(namespace, object_id, wait_s, busy):
            yield


@contextmanager
def _advisory_lock(
    namespace: int, object_id: int, wait_s: float, busy: Callable[[], Exception]
) -> Iterator[None]:
    key = [namespace, _objid(object_id)]
    deadline = time.monotonic() + wait_s
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s::int4, %s::int4)", key)
            row = cursor.fetchone()
        if row and row[0]:
            break
        if time.monotonic() >= deadline:
            raise busy()
        time.sleep(_POLL_S)
    try:
        yield
    finally:
        _advisory_unlock(object_id, key)


def _advisory_unlock(object_id: int, key: list[int]) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s::int4, %s::int4)", key)
    except DatabaseError:
        # The session may be broken or inside a failed transaction; ending the session
        # releases every lock it holds. Inside an atomic block the caller's transaction
        # owns the connection, and the session's end (worker shutdown) releases it.
        log.warning("cannot unlock %s; closing the session", key, exc_info=True)
        if not connection.in_atomic_block:
            connection.close()


@contextmanager
def _local_lock(
    namespace: int, object_id: int, wait_s: float, busy: Callable[[], Exception]
) -> Iterator[None]:
    with _local_guard:
        lock = _local_locks.setdefault((namespace, object_id), threading.RLock())
    if not lock.acquire(timeout=max(wait_s, 0.0)):
        raise busy()
    try:
        yield
    finally:
        lock.release()
