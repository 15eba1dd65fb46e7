"""Two regions for the mirror tests: ``east`` and ``west``, each a cluster of three
broker processes run by its own controller process (``ReplicatedRegion``, on the
pytest-django test database), a tenant allowed in both, and mirror links made through
the mirrors app's services. The controllers start the mirror workers; the tests produce
with the SDK in either region, kill and stop workers and brokers, then read every
partition of both regions whole.

Timeouts are short (``MIRROR_ENV``): a worker whose status is unreadable for 3 s is
replaced, a link without progress for 3 s is degraded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.mirrors import services as mirror_services
from controlplane.mirrors.models import MirrorLink, MirrorWorker
from controlplane.regions import services
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from controlplane.topics.reconcile import Outcome, reconcile_topic
from controlplane.topics.services import create_topic
from dataplane.client import Admin, Consumer, Producer, TopicPartition
from dataplane.errors import MeridianError
from tests.integration.replication.region import CONTROLLER_ENV, ReplicatedRegion, _eager_celery
from tests.support.controlplane import make_tenant

ADMIN = Actor.system("mirror-test")
PARTITIONS = 3
MIRROR_ENV = {
    **CONTROLLER_ENV,
    "MERIDIAN_MIRROR_WORKER_TIMEOUT_S": "3",
    "MERIDIAN_MIRROR_STALL_S": "3",
    "MERIDIAN_MIRROR_STATUS_TIMEOUT_S": "0.5",
}


def wait_until(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``condition`` until truthy (returned); fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.1)


@dataclass(frozen=True)
class Copy:
    """One record as read back from a region."""

    partition: int
    offset: int
    value: bytes
    origin_region: str | None
    origin_offset: int | None


class TwoRegions:
    """See the module docstring."""

    def __init__(self, root: Path) -> None:
        for name in ("east", "west"):
            (root / name).mkdir()
        self.regions = {
            name: ReplicatedRegion(
                root / name,
                services.create_region(name=name, actor=ADMIN),
                controller_env=MIRROR_ENV,
            )
            for name in ("east", "west")
        }
        self.tenant: Tenant | None = None

    def __getitem__(self, name: str) -> ReplicatedRegion:
        return self.regions[name]

    def start(self) -> TwoRegions:
        for region in self.regions.values():  # both clusters start at once
            region.cluster = services.create_cluster(
                region.region, name="main", provisioner="local", broker_count=3, actor=ADMIN
            )
            region.controller = region._start_controller()
        for name, region in self.regions.items():
            wait_until(region.brokers_ready, 90, f"{name}'s brokers")
        self.tenant = make_tenant("acme", region=self.regions["east"].region)
        self.tenant.regions.add(self.regions["west"].region)
        return self

    def kill_all(self) -> None:
        for region in self.regions.values():  # a clean stop closes their database sessions
            region.stop_controller()
        for name in self.regions:
            for worker in MirrorWorker.objects.filter(to_region__name=name, pid__isnull=False):
                with contextlib.suppress(ProcessLookupError, TypeError):
                    os.kill(worker.pid, signal.SIGCONT)  # type: ignore[arg-type]
                    os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
        for region in self.regions.values():
            region.kill_all()

    def logs(self) -> str:
        return "\n".join(region.logs(12_000) for region in self.regions.values())

    # -- topics and links -------------------------------------------------------------------
    def create_topic(self, name: str) -> Topic:
        assert self.tenant is not None
        with _eager_celery():
            topic = create_topic(
                self.tenant,
                name=name,
                partitions=PARTITIONS,
                replication_factor=3,
                min_insync_replicas=2,
                actor=ADMIN,
            )
        self.wait_ready(topic)
        return topic

    def wait_ready(self, topic: Topic) -> None:
        def ready() -> bool:
            with contextlib.suppress(Exception):  # a broker not answering yet
                if reconcile_topic(topic.pk) in (Outcome.READY, Outcome.UNCHANGED):
                    return Topic.objects.get(pk=topic.pk).status == ProvisioningStatus.READY
            time.sleep(0.3)
            return False

        wait_until(ready, 60, f"topic {topic.full_name} ready in {topic.cluster.region.name}")

    def create_link(self, name: str, topic: str, *, direction: str) -> MirrorLink:
        """A link east → west covering ``topic`` (short name), from the earliest offset;
        returns once the copy in west is ready and the workers run."""
        assert self.tenant is not None
        with _eager_celery():
            link = mirror_services.create_link(
                self.tenant,
                name=name,
                source_region="east",
                target_region="west",
                direction=direction,
                topics=[topic],
                start_position="earliest",
                actor=ADMIN,
            )
        copy = wait_until(
            lambda: Topic.objects.filter(mirror_link=link, cluster__region__name="west").first(),
            30,
            "the copy in west",
        )
        self.wait_ready(copy)
        legs = 2 if direction == "two-way" else 1
        wait_until(lambda: len(self.running_workers(link)) == legs, 60, f"{legs} worker(s) run")
        return link

    def running_workers(self, link: MirrorLink) -> list[MirrorWorker]:
        return [
            w
            for w in MirrorWorker.objects.filter(link=link).select_related("to_region")
            if w.pid is not None and w.last_status_at is not None and _alive(w.pid)
        ]

    def worker(self, link: MirrorLink, to_region: str) -> MirrorWorker:
        return MirrorWorker.objects.get(link=link, to_region__name=to_region)

    # -- records ----------------------------------------------------------------------------
    def bootstrap(self, region: str) -> str:
        return self.regions[region].bootstrap

    def producer(self, region: str) -> Producer:
        return Producer(self.bootstrap(region), acks="all", linger_ms=5)

    def end_offsets(self, region: str, topic: str) -> dict[int, int]:
        specs = {TopicPartition(topic, p): "latest" for p in range(PARTITIONS)}
        with Admin(self.bootstrap(region), request_timeout_ms=5_000) as admin:
            return {tp.partition: o for tp, (o, _) in admin.list_offsets(specs).items()}

    def holds(self, region: str, topic: str, count: int) -> bool:
        """Whether ``topic`` holds ``count`` records in ``region`` (False while its
        leaders move)."""
        try:
            return sum(self.end_offsets(region, topic).values()) >= count
        except MeridianError as error:
            if not error.retriable:
                raise
            return False

    def read_all(self, region: str, topic: str) -> list[Copy]:
        """Every record of every partition of ``topic`` in ``region``, up to its end now."""
        ends = self.end_offsets(region, topic)
        consumer = Consumer(self.bootstrap(region), enable_auto_commit=False)
        got: list[Copy] = []
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            consumer.seek_to_beginning(tps)
            deadline = time.monotonic() + 60
            while any(consumer.position(tp) < ends[tp.partition] for tp in tps):
                assert time.monotonic() < deadline, f"reading {topic} in {region}"
                for record in consumer.poll(timeout_ms=300):
                    if record.offset < ends[record.partition]:
                        got.append(copy_of(record))
        finally:
            consumer.close()
        return got

    def wait_copied(self, link: MirrorLink, want: dict[str, int], topic: str) -> None:
        """Until each region holds ``want[region]`` records of ``topic`` and the link
        reports no lag."""
        for region, count in want.items():
            wait_until(
                lambda r=region, c=count: self.holds(r, topic, c),  # type: ignore[misc]
                90,
                f"{count} records of {topic} in {region}",
            )
        wait_until(lambda: caught_up(link), 60, f"{link.name} reports no lag")


def caught_up(link: MirrorLink) -> bool:
    link = MirrorLink.objects.get(pk=link.pk)
    partitions = list(link.partitions.all())
    return bool(partitions) and all(p.lag_records == 0 for p in partitions)


def copy_of(record: Any) -> Copy:
    headers = dict(record.headers)
    region = headers.get("x-origin-region")
    offset = headers.get("x-origin-offset")
    return Copy(
        record.partition,
        record.offset,
        record.value,
        region.decode() if region is not None else None,
        int(offset) if offset is not None else None,
    )


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "T")


@pytest.fixture
def regions(
    transactional_db: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[TwoRegions]:
    pair = TwoRegions(tmp_path)
    try:
        yield pair.start()
    finally:
        report = getattr(request.node, "report_call", None)
        pair.kill_all()
        if report is not None and report.failed:
            print(pair.logs())
