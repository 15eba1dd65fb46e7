"""Group members polled on threads of their own, as consumers poll, for tests of
``GroupMember`` against an in-process coordinator or real brokers."""

from __future__ import annotations

import threading
import time
from typing import Any

from dataplane.client.group import GroupMember
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import TopicPartition
from dataplane.errors import MeridianError


class Recorder:
    """A RebalanceListener noting each callback, and checking it runs on the poll thread."""

    def __init__(self, owners: dict[TopicPartition, str] | None = None) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []
        self.thread: threading.Thread | None = None
        self.owners = owners  # shared among members: who holds each partition
        self.name = ""
        self.errors: list[str] = []

    def _note(self, kind: str, partitions: set[TopicPartition]) -> None:
        if threading.current_thread() is not self.thread:
            self.errors.append(f"{kind} ran on {threading.current_thread().name}")
        self.events.append((kind, frozenset(partitions)))
        if self.owners is None:
            return
        for tp in partitions:
            if kind == "assigned":
                holder = self.owners.setdefault(tp, self.name)
                if holder != self.name:
                    self.errors.append(f"{tp} assigned to {self.name} while {holder} holds it")
            elif self.owners.get(tp) == self.name:
                del self.owners[tp]

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self._note("revoked", partitions)

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self._note("assigned", partitions)

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self._note("lost", partitions)


class Runner:
    """A GroupMember polled every 10 ms on a thread of its own, as a consumer would."""

    def __init__(
        self, metadata: ClusterMetadata, name: str, topics: list[str], **settings: Any
    ) -> None:
        self.name = name
        self.listener = Recorder(settings.pop("owners", None))
        self.listener.name = name
        defaults = {
            "group_id": "app",
            "session_timeout_ms": 2000,
            "rebalance_timeout_ms": 3000,
            "heartbeat_interval_ms": 100,
            "client_id": name,
        }
        check_s = settings.pop("partition_check_s", None)
        self.member = GroupMember(metadata, listener=self.listener, **{**defaults, **settings})
        if check_s is not None:
            self.member.PARTITION_CHECK_INTERVAL_S = check_s
        self.member.subscribe(topics)
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"poll-{name}", daemon=True)
        self.listener.thread = self.thread
        self.paused = threading.Event()

    def start(self) -> Runner:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.paused.is_set():
                try:
                    self.member.poll()
                except MeridianError as exc:
                    self.failures.append(exc)
            time.sleep(0.01)

    def stop(self, *, leave: bool = True) -> None:
        self._stop.set()
        self.thread.join()
        self.listener.thread = threading.current_thread()
        self.member.close(leave=leave)

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        return self.member.assignment()


def settled(*members: Runner, expect: set[TopicPartition]) -> bool:
    """Every partition held by exactly one member, all in one generation, none rejoining
    (nor with a round trip in flight or waiting to be installed)."""
    held = [tp for m in members for tp in m.assignment]
    generations = {m.member.generation()[0] for m in members}
    return (
        len(held) == len(set(held))
        and set(held) == expect
        and len(generations) == 1
        and not any(m.member._needs_join() or m.member._rebalancing() for m in members)
    )
