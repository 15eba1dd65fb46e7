"""A region for the fault test: a real controller process (Postgres lease, on the
pytest-django test database) whose ``local`` provisioner starts three broker processes,
and a replicated topic created through the control plane's services.

    region = ReplicatedRegion(tmp_path, region_row).start(brokers=3)
    topic = region.create_topic("orders", partitions=4, replication_factor=3, min_isr=2)
    region.states()          # partition -> PartitionState (leader, replicas, isr) from Postgres
    region.pid(2)            # broker 2's process id (the provisioner records it)
    region.stop_controller(); region.stop_brokers()    # clean stops, in that order
    region.kill_all()        # teardown: SIGCONT + SIGKILL whatever is left

The controller runs with short ticks and timeouts (``CONTROLLER_ENV``), so a dead broker
is noticed within about two seconds. Brokers it starts get their own session and outlive
it; ``kill_all`` finds them by the pids in Postgres.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings

from controlplane.celery import app as celery_app
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.provisioning.local import LocalProvisioner
from controlplane.regions import services
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.topics.models import PartitionAssignment, Topic
from controlplane.topics.reconcile import Outcome, reconcile_topic
from controlplane.topics.services import create_topic
from tests.support.brokers import REPO_ROOT
from tests.support.controlplane import make_tenant

ADMIN = Actor.system("fault-test")
CONTROLLER_ENV = {
    "MERIDIAN_CONTROLLER_TICK_S": "0.2",
    # A broker silent this long is dead to the controller (both spellings: the setting
    # was renamed when replication came).
    "MERIDIAN_BROKER_SESSION_TIMEOUT_S": "1.5",
    "MERIDIAN_BROKER_TIMEOUT_S": "1.5",
    "MERIDIAN_BROKER_RPC_TIMEOUT_S": "1",
    "MERIDIAN_METADATA_PUSH_TIMEOUT_S": "1",
    "MERIDIAN_LOG_LEVEL": "INFO",  # elections and ISR changes, for a failure's report
}
STOP_TIMEOUT_S = 30.0


def wait_until(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``condition`` until truthy (returned); fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


def database_url() -> str:
    db = settings.DATABASES["default"]
    user, password = quote(db["USER"]), quote(db["PASSWORD"])
    return f"postgres://{user}:{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@dataclass(frozen=True)
class PartitionState:
    """One partition as the controller has it in Postgres."""

    leader: int | None  # broker id; None when offline or not elected yet
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def full(self) -> bool:
        return self.leader is not None and set(self.isr) == set(self.replicas)


class ReplicatedRegion:
    """See the module docstring."""

    def __init__(
        self, root: Path, region: Region, *, controller_env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.region = region
        self.controller_env = CONTROLLER_ENV if controller_env is None else controller_env
        self.cluster: Cluster | None = None
        self.topics: list[Topic] = []
        self.topic: Topic | None = None  # the last one created
        self.controller: subprocess.Popen[bytes] | None = None
        self.provisioner = LocalProvisioner(root / "data")

    # -- starting ---------------------------------------------------------------------------
    def start(self, brokers: int = 3) -> ReplicatedRegion:
        self.cluster = services.create_cluster(
            self.region, name="main", provisioner="local", broker_count=brokers, actor=ADMIN
        )
        self.controller = self._start_controller()
        wait_until(self.brokers_ready, 60, "the controller starts every broker")
        return self

    def _start_controller(self) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "MERIDIAN_DATABASE_URL": database_url(),
            "MERIDIAN_DATA_DIR": str(self.root / "data"),
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
            ),
            "PYTHONUNBUFFERED": "1",
            **self.controller_env,
        }
        command = [sys.executable, "-m", "controlplane.controller"]
        command += ["--region", self.region.name, "--id", "fault-controller"]
        with self.controller_log.open("ab") as log:
            return subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT
            )

    @property
    def controller_log(self) -> Path:
        return self.root / "controller.log"

    def create_topic(
        self, name: str, *, partitions: int, replication_factor: int, min_isr: int
    ) -> Topic:
        """The topic through ``create_topic`` (replication settings only where topics
        have them, so the harness also runs with replication factor 1 where replication
        is absent), reconciled onto every replica broker, then elected and fully in sync."""
        tenant = make_tenant(f"t-{name}", region=self.region)
        extra: dict[str, Any] = {}
        if any(f.name == "replication_factor" for f in Topic._meta.get_fields()):
            extra = {"replication_factor": replication_factor, "min_insync_replicas": min_isr}
        else:
            assert replication_factor == 1, "this control plane has no replication"
        with _eager_celery():  # the reconcile the service enqueues runs here, after commit
            topic = create_topic(tenant, name=name, partitions=partitions, actor=ADMIN, **extra)
        wait_until(lambda: self._reconciled(topic), 60, f"topic {topic.full_name} ready")
        self.topic = Topic.objects.get(pk=topic.pk)
        self.topics.append(self.topic)
        wait_until(self.all_in_sync, 60, "every partition led, with a full ISR")
        return self.topic

    def _reconciled(self, topic: Topic) -> bool:
        with contextlib.suppress(Exception):  # a broker not answering yet: try again
            if reconcile_topic(topic.pk) in (Outcome.READY, Outcome.UNCHANGED):
                return Topic.objects.get(pk=topic.pk).status == ProvisioningStatus.READY
        time.sleep(0.5)
        return False

    # -- observing --------------------------------------------------------------------------
    def brokers(self) -> list[Broker]:
        assert self.cluster is not None
        return list(self.cluster.brokers.order_by("broker_id"))

    def brokers_ready(self) -> bool:
        return all(
            b.phase == BrokerPhase.READY and self.provisioner.is_running(b) for b in self.brokers()
        )

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers() if b.address)

    def pid(self, broker_id: int) -> int | None:
        broker = next(b for b in self.brokers() if b.broker_id == broker_id)
        return broker.pid if self.provisioner.is_running(broker) else None

    def states(self, topic: Topic | None = None) -> dict[int, PartitionState]:
        """Partition -> state of ``topic`` (default: the last one created)."""
        topic = topic or self.topic
        assert topic is not None
        rows = PartitionAssignment.objects.filter(topic=topic).select_related("leader", "broker")
        return {row.partition: _state(row, self._ids()) for row in rows}

    def _ids(self) -> dict[int, int]:
        return {b.pk: b.broker_id for b in self.brokers()}

    def all_in_sync(self) -> bool:
        """Every broker up and ready, every partition of every topic led with a full ISR."""
        return self.brokers_ready() and all(
            s.full for topic in self.topics for s in self.states(topic).values()
        )

    def partition_dir(self, broker_id: int, partition: int) -> Path:
        assert self.topic is not None
        broker = next(b for b in self.brokers() if b.broker_id == broker_id)
        return self.provisioner.paths(broker).data_dir / f"{self.topic.full_name}-{partition}"

    def logs(self, tail_bytes: int = 30_000) -> str:
        parts = []
        for path in sorted(self.root.rglob("*.log")):
            if path.parent.name.endswith(tuple(f"-{i}" for i in range(100))):
                continue  # a partition's segment files, not a process log
            lines = path.read_text(errors="replace").splitlines(keepends=True)
            # Request logs of Django and Celery say nothing about replication.
            text = "".join(x for x in lines if "celery" not in x and "HTTP" not in x)
            text = text[-tail_bytes:]
            parts.append(f"===== {path.name} =====\n{text}")
        return "\n".join(parts)

    @contextlib.contextmanager
    def held_down(self, broker_id: int, timeout_s: float = 10.0) -> Iterator[None]:
        """Keep a killed broker from starting again while inside: hold the lock of its
        data directory (``LogManager`` takes it with ``flock``), so every restart the
        provisioner tries exits at once and the controller must fail its partitions
        over, as when a host stays down. Waits (up to ``timeout_s``) for the killed
        process to release the lock first."""
        broker = next(b for b in self.brokers() if b.broker_id == broker_id)
        path = self.provisioner.paths(broker).data_dir / ".lock"
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"broker {broker_id} still holds {path}") from None
                    time.sleep(0.005)
            yield
        finally:
            os.close(descriptor)  # releases the lock

    # -- stopping ---------------------------------------------------------------------------
    def stop_controller(self) -> None:
        """SIGTERM the controller (it gives its lease up); brokers keep running."""
        if self.controller is not None and self.controller.poll() is None:
            self.controller.send_signal(signal.SIGTERM)
            try:
                self.controller.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.controller.kill()
                self.controller.wait()

    def stop_brokers(self) -> list[int]:
        """SIGTERM every broker and wait until each has exited (the controller must be
        stopped first, or it starts them again). Returns the ids that needed SIGKILL."""
        running = [b for b in self.brokers() if self.provisioner.is_running(b)]
        for broker in running:
            assert broker.pid is not None
            os.kill(broker.pid, signal.SIGTERM)
        deadline, forced = time.monotonic() + STOP_TIMEOUT_S, []
        for broker in running:
            while self.provisioner.is_running(broker) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.provisioner.is_running(broker):
                assert broker.pid is not None
                os.kill(broker.pid, signal.SIGKILL)
                forced.append(broker.broker_id)
        return forced

    def kill_all(self) -> None:
        """Teardown: no process of this region survives, whatever the test did."""
        if self.controller is not None and self.controller.poll() is None:
            self.controller.kill()
            self.controller.wait()
        if self.cluster is None:
            return
        for broker in Broker.objects.filter(cluster=self.cluster, pid__isnull=False):
            if self.provisioner.is_running(broker):
                assert broker.pid is not None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(broker.pid, signal.SIGCONT)
                    os.kill(broker.pid, signal.SIGKILL)


def _state(row: PartitionAssignment, ids: dict[int, int]) -> PartitionState:
    """A row's state; without replication fields (replication factor 1 only), the
    assigned broker is the only replica and the leader the whole ISR."""
    leader = ids.get(row.leader_id) if row.leader_id is not None else None
    replicas = getattr(row, "replicas", None)
    isr = getattr(row, "isr", None)
    if not replicas:
        replicas = [ids[row.broker_id]]
        isr = [leader] if leader is not None else []
    return PartitionState(leader, row.leader_epoch, tuple(replicas), tuple(isr or ()))


@contextlib.contextmanager
def _eager_celery() -> Iterator[None]:
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager = previous
