"""Real broker processes for tests, on 127.0.0.1 (``dataplane.local`` with test helpers).

    broker = BrokerProcess(tmp_path / "b1", broker_id=1).start()
    broker.address            # "127.0.0.1:PORT", for grpc channels and SDK bootstrap
    broker.kill()             # SIGKILL: an unclean stop
    broker.restart()          # same data directory, same port
    broker.terminate()        # SIGTERM; asserts a clean exit (code 0)

    brokers = start_cluster(tmp_path, 3)   # ids 1..n, every one knows every other
    with tiered_process(tmp_path / "b1", ["--remote-store-uri", str(objects)]) as broker:
        ...                                # a broker tiering every 100 ms to that store
    wait_for_cluster(brokers)              # until each one's Metadata lists them all

A broker keeps its data in ``<dir>/data`` and its log (stdout and stderr) in
``<dir>/broker-<id>.log``; ``log_text()`` returns it, and a failed ``start`` raises
``BrokerProcessError`` (an ``AssertionError``) ending with it. ``stop_all`` (used by
the fixtures) kills whatever is left.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.client.connection import CHANNEL_OPTIONS
from dataplane.local import READY_TIMEOUT_S, BrokerStartError, LocalBroker, free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
# A broker that uploads sealed segments within 100 ms and removes a killed upload's
# leftovers after a second.
TIER_ARGS = ("--tier-interval-ms", "100", "--orphan-grace-ms", "1000")


class BrokerProcess(LocalBroker):
    """One broker process; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        broker_id: int = 1,
        peers: dict[int, str] | None = None,
        port: int = 0,
        extra_args: Sequence[str] = (),
        kafka_port: int | None = None,
    ) -> None:
        """``kafka_port``: also serve Kafka's protocol there (0: any port)."""
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        super().__init__(
            broker_id,
            port,
            self.directory / "data",
            dict(peers or {}),
            extra_args=list(extra_args),
            kafka_port=kafka_port,
        )

    @property
    def log_path(self) -> Path:
        return self.log_file

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> BrokerProcess:
        """Start the process and wait until it serves; raises with its log otherwise."""
        self.launch()
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        try:
            super().wait_ready(timeout_s)
        except BrokerStartError as exc:
            raise BrokerProcessError(str(exc)) from None

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, wait, and assert the clean exit code 0; returns it."""
        assert self.running, "not running"
        code = self.stop(timeout_s)
        if code != 0:
            raise BrokerProcessError(
                f"broker {self.broker_id} exited with {code} after SIGTERM; its log:\n"
                + self.log_text()[-8000:]
            )
        return code

    def restart(self, *, clean: bool = False) -> BrokerProcess:
        """Stop (SIGKILL, or SIGTERM with ``clean``) and start again on the same port
        and data directory."""
        if clean:
            self.terminate()
        else:
            self.kill()
        return self.start()

    def channel(self) -> grpc.Channel:
        """A new channel to this broker (the caller closes it)."""
        return grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"BrokerProcess(id={self.broker_id}, {self.address}, {state})"


class BrokerProcessError(AssertionError):
    """A broker did not start or stop as expected; the message ends with its log."""


def start_cluster(
    tmp_path: Path, n: int = 3, *, extra_args: Sequence[str] = (), kafka: bool = False
) -> list[BrokerProcess]:
    """Brokers 1..n under ``tmp_path/broker-<id>``, each with every other as a peer
    (``kafka``: each also serves Kafka's protocol, on a port of its own).

    Ports are picked up front so each broker starts with the full peer list. Returns once
    every broker serves (not yet necessarily seeing the others: see ``wait_for_cluster``).
    """
    ports = free_ports(n)
    addresses = {i + 1: f"127.0.0.1:{port}" for i, port in enumerate(ports)}
    brokers = [
        BrokerProcess(
            tmp_path / f"broker-{broker_id}",
            broker_id=broker_id,
            port=ports[broker_id - 1],
            peers={i: a for i, a in addresses.items() if i != broker_id},
            extra_args=extra_args,
            kafka_port=0 if kafka else None,
        )
        for broker_id in addresses
    ]
    try:
        for broker in brokers:
            broker.launch()
        for broker in brokers:
            broker.wait_ready()
    except BaseException:
        stop_all(brokers)
        raise
    return brokers


def metadata(broker: BrokerProcess, topics: Iterable[str] = (), **kwargs: Any) -> Any:
    """A ``MetadataResponse`` from ``broker``."""
    with broker.channel() as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        return stub.Metadata(broker_pb2.MetadataRequest(topics=list(topics), **kwargs), timeout=10)


def wait_for_cluster(
    brokers: Sequence[BrokerProcess], topics: Iterable[str] = (), timeout_s: float = 15.0
) -> None:
    """Wait until every broker's Metadata shows every partition any broker hosts
    (``topics``: only those topics)."""
    wanted = list(topics)
    deadline = time.monotonic() + timeout_s
    while True:
        local = set()
        for broker in brokers:
            for topic in metadata(broker, wanted, local_only=True).topics:
                local.update((topic.name, p.partition, broker.broker_id) for p in topic.partitions)
        views = [_placement(metadata(broker, wanted)) for broker in brokers]
        if all(view >= local for view in views):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"brokers do not agree on the cluster within {timeout_s} s")
        time.sleep(0.05)


def _placement(response: Any) -> set[tuple[str, int, int]]:
    return {(t.name, p.partition, p.leader_id) for t in response.topics for p in t.partitions}


@contextmanager
def tiered_process(
    directory: Path,
    store_args: Sequence[str],
    request: pytest.FixtureRequest | None = None,
    *,
    extra_args: Sequence[str] = (),
) -> Iterator[BrokerProcess]:
    """A running broker (id 1) with an object store (``store_args``: the
    ``--remote-store-*`` flags) tiering often; its log printed if the test failed."""
    process = BrokerProcess(
        directory, broker_id=1, extra_args=[*store_args, *TIER_ARGS, *extra_args]
    )
    try:
        yield process.start()
    finally:
        report = getattr(request.node, "report_call", None) if request is not None else None
        if report is not None and report.failed:
            print(process.log_text()[-20000:])
        stop_all([process])


def stop_all(brokers: Iterable[BrokerProcess]) -> None:
    """Kill every broker still running (teardown: never raises for one that is gone)."""
    for broker in brokers:
        broker.kill()


__all__ = [
    "BrokerProcess",
    "BrokerProcessError",
    "free_ports",
    "metadata",
    "start_cluster",
    "stop_all",
    "tiered_process",
    "wait_for_cluster",
]
