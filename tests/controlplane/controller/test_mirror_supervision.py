"""The controller's supervision of mirror workers, one round at a time against a
recording provisioner: desired workers start with the configuration only the controller
completes, statuses are recorded, a silent worker is replaced (the provisioner told
which process to fence), a changed configuration restarts, a paused link's worker stops
and a deleted link goes with its last worker; a round never holds up the tick. The real
processes: tests/controlplane/provisioning and tests/integration/mirror."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane.accounts.models import ServiceAccount
from controlplane.controller import mirrors as supervision
from controlplane.controller.mirrors import MirrorSupervisor
from controlplane.mirrors import services
from controlplane.mirrors.choices import WorkerPhase
from controlplane.mirrors.models import MirrorLink, MirrorWorker
from controlplane.mirrors.workers import desired_workers
from controlplane.provisioning import static
from controlplane.regions.models import Cluster
from controlplane.regions.provisioners import (
    MirrorWorkerError,
    MirrorWorkerProcess,
    MirrorWorkerSpec,
    RunningMirrorWorker,
)
from tests.controlplane.mirrors.support import (
    SYSTEM,
    converge,
    copy_of,
    link,
    mirror_tenant,
    topic,
    two_regions,
)

pytestmark = pytest.mark.django_db


class Recorder:
    """A provisioner that runs nothing and remembers what it was asked."""

    runs_mirror_workers = True

    def __init__(self) -> None:
        self.started: list[tuple[MirrorWorkerSpec, dict[str, Any], int | None]] = []
        self.stopped: list[int | None] = []
        self.running: set[int] = set()
        self._next_pid = 1000

    def ensure_mirror_worker(
        self,
        spec: MirrorWorkerSpec,
        config: Mapping[str, Any],
        secret: str | None,
        previous: RunningMirrorWorker | None = None,
    ) -> MirrorWorkerProcess:
        fenced = previous.pid if previous is not None else None
        self.running.discard(fenced or 0)
        self._next_pid += 1
        self.running.add(self._next_pid)
        self.started.append((spec, dict(config), fenced))
        return MirrorWorkerProcess(self._next_pid, "127.0.0.1", 9000, f"/w/{spec.name}")

    def stop_mirror_worker(self, worker: RunningMirrorWorker) -> None:
        self.stopped.append(worker.pid)
        self.running.discard(worker.pid or 0)

    def mirror_worker_running(self, worker: RunningMirrorWorker) -> bool:
        return worker.pid in self.running


class Clock:
    def __init__(self) -> None:
        self.now = timezone.now()

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def made() -> MirrorLink:
    two_regions()
    tenant = mirror_tenant()
    origin = topic(tenant, partitions=2)
    created = link(tenant)
    converge(origin, copy_of("acme.orders"))
    return created


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def west(recorder: Recorder, clock: Clock) -> MirrorSupervisor:
    return MirrorSupervisor("west", lambda cluster: recorder, clock, is_active=lambda: True)  # type: ignore[arg-type,return-value]


def status_of(worker: MirrorWorker) -> dict[str, Any]:
    row = {"source_topic": "acme.orders", "target_topic": "acme.orders", "partition": 0,
           "state": "copying", "next_source_offset": 5, "source_end_offset": 5,
           "lag_records": 0, "lag_seconds": 0.0, "error": ""}  # fmt: skip
    return {"link_id": worker.link_id, "generation": worker.generation, "partitions": [row],
            "points": []}  # fmt: skip


def the_worker() -> MirrorWorker:
    return MirrorWorker.objects.get()


def test_a_desired_worker_starts_with_both_regions_brokers_and_a_generation(
    made: MirrorLink, west: MirrorSupervisor, recorder: Recorder
) -> None:
    west.supervise()
    [(spec, config, fenced)] = recorder.started
    assert (spec.region, spec.name, spec.generation) == ("west", f"link-{made.pk}-east-west", 1)
    east_brokers = Cluster.objects.get(region__name="east").brokers.order_by("broker_id")
    assert config["source"]["bootstrap"] == [b.address for b in east_brokers]
    assert config["target"]["bootstrap"] == [
        "127.0.0.1:40001",
        "127.0.0.1:40002",
        "127.0.0.1:40003",
    ]
    assert (config["generation"], config["credentials"], fenced) == (1, None, None)
    worker = the_worker()
    assert (worker.pid, worker.status_port, worker.phase) == (1001, 9000, WorkerPhase.STARTING)


def test_the_other_region_runs_no_worker_of_a_one_way_link(
    made: MirrorLink, recorder: Recorder, clock: Clock
) -> None:
    east = MirrorSupervisor("east", lambda c: recorder, clock, is_active=lambda: True)  # type: ignore[arg-type,return-value]
    east.supervise()
    assert recorder.started == []


def test_a_status_read_is_recorded_and_the_worker_runs(
    made: MirrorLink, west: MirrorSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    west.supervise()
    monkeypatch.setattr(supervision, "read_status", lambda host, port: status_of(the_worker()))
    west.supervise()
    worker = the_worker()
    assert worker.phase == WorkerPhase.RUNNING
    assert worker.last_status_at is not None
    assert made.partitions.get().next_source_offset == 5


def test_a_worker_silent_past_the_timeout_is_replaced_with_the_old_one_fenced(
    made: MirrorLink, west: MirrorSupervisor, recorder: Recorder, clock: Clock, settings: Any
) -> None:
    settings.MIRROR_WORKER_TIMEOUT_S = 10
    west.supervise()
    clock.now += timedelta(seconds=9)
    west.supervise()  # silent, not for long enough
    assert len(recorder.started) == 1
    clock.now += timedelta(seconds=2)
    west.supervise()
    assert [(s.generation, fenced) for s, _, fenced in recorder.started] == [(1, None), (2, 1001)]
    assert (the_worker().generation, the_worker().pid) == (2, 1002)


def test_a_dead_worker_is_started_again_at_once(
    made: MirrorLink, west: MirrorSupervisor, recorder: Recorder
) -> None:
    west.supervise()
    recorder.running.clear()  # the process died
    west.supervise()
    assert [s.generation for s, _, _ in recorder.started] == [1, 2]


def test_a_changed_configuration_stops_the_worker_and_starts_a_new_generation(
    made: MirrorLink, west: MirrorSupervisor, recorder: Recorder
) -> None:
    west.supervise()
    MirrorWorker.objects.update(config_hash="from an older configuration")
    west.supervise()
    assert recorder.stopped == [1001]
    assert [s.generation for s, _, _ in recorder.started] == [1, 2]


def test_a_paused_link_stops_its_worker_and_a_deleted_one_goes_with_it(
    made: MirrorLink, west: MirrorSupervisor, recorder: Recorder
) -> None:
    west.supervise()
    services.update_link(made, paused=True, actor=SYSTEM)
    west.supervise()
    west.supervise()  # stopped once
    assert recorder.stopped == [1001]
    assert (the_worker().phase, the_worker().pid) == (WorkerPhase.STOPPED, None)
    services.update_link(MirrorLink.objects.get(pk=made.pk), paused=False, actor=SYSTEM)
    west.supervise()
    assert the_worker().generation == 2  # generations go on after a pause
    services.delete_link(MirrorLink.objects.get(pk=made.pk), actor=SYSTEM)
    west.supervise()
    assert recorder.stopped == [1001, 1002]
    assert not MirrorLink.objects.filter(pk=made.pk).exists()


def test_the_tick_never_waits_for_a_round(
    made: MirrorLink, west: MirrorSupervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, rounds = threading.Event(), list[int]()

    def blocked_round() -> None:
        rounds.append(1)
        release.wait(10)

    monkeypatch.setattr(west, "supervise", blocked_round)
    try:
        west.tick()
        west.tick()  # one round at a time: this one does not start another
        assert not release.is_set()  # both ticks returned while the round waits
    finally:
        release.set()
        west.close()
    assert rounds == [1]


def test_a_failed_start_is_recorded_and_tried_again_after_the_timeout(
    made: MirrorLink, west: MirrorSupervisor, recorder: Recorder, clock: Clock, settings: Any
) -> None:
    settings.MIRROR_WORKER_TIMEOUT_S = 10
    refusals = []

    def refuse(spec: MirrorWorkerSpec, *args: Any, **kwargs: Any) -> MirrorWorkerProcess:
        refusals.append(spec.generation)
        raise MirrorWorkerError(spec.name, "no room for it")

    recorder.ensure_mirror_worker = refuse  # type: ignore[method-assign]
    west.supervise()
    assert (the_worker().phase, the_worker().phase_reason) == (WorkerPhase.FAILED, "no room for it")
    west.supervise()  # not at every tick
    clock.now += timedelta(seconds=11)
    west.supervise()
    assert refusals == [1, 2]  # every attempt takes a generation of its own


def test_a_deposed_controller_starts_no_worker(
    made: MirrorLink, recorder: Recorder, clock: Clock
) -> None:
    """The lease is checked again right before a start: a controller whose region now
    names a newer epoch starts nothing, and the generation is not taken."""
    deposed = MirrorSupervisor("west", lambda c: recorder, clock, is_active=lambda: True,  # type: ignore[arg-type,return-value]
                               holds_lease=lambda: False)  # fmt: skip
    deposed.supervise()
    assert recorder.started == []
    assert the_worker().generation == 0


def test_a_start_takes_its_generation_by_compare_and_set(
    made: MirrorLink, west: MirrorSupervisor, recorder: Recorder
) -> None:
    """Another controller started the worker since this one read its row: no second
    start."""
    west.supervise()
    seen = the_worker()
    MirrorWorker.objects.filter(pk=seen.pk).update(generation=seen.generation + 1)
    provisioner = west._provisioner(None)
    assert provisioner is not None
    west._start(provisioner, desired_workers("west")[0], seen)
    assert len(recorder.started) == 1
    assert the_worker().generation == 2


def test_a_worker_start_failure_is_stored_without_addresses(
    made: MirrorLink, west: MirrorSupervisor, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> MirrorWorkerProcess:
        raise MirrorWorkerError("w", "could not reach ipv4:10.1.2.3:4101 (broker 10.1.2.3:4102)")

    monkeypatch.setattr(recorder, "ensure_mirror_worker", refuse)
    west.supervise()
    worker = the_worker()
    assert worker.phase == WorkerPhase.FAILED
    assert "10.1.2.3" not in worker.phase_reason
    assert "<address>" in worker.phase_reason


def test_no_credentials_are_made_for_a_worker_its_provisioner_will_not_run(
    made: MirrorLink, recorder: Recorder, clock: Clock, settings: Any
) -> None:
    """A static (or Kubernetes) target region runs no worker: its controller makes no
    service account for one (with Keycloak it could not: it holds no admin password)."""
    settings.BROKER_AUTH = True
    refuser = static.StaticProvisioner()
    MirrorSupervisor("west", lambda c: refuser, clock, is_active=lambda: True).supervise()  # type: ignore[arg-type,return-value]
    assert (the_worker().phase, the_worker().phase_reason) == (
        WorkerPhase.FAILED, static.NO_MIRROR_WORKERS,
    )  # fmt: skip
    assert not ServiceAccount.objects.filter(managed_by_link=made).exists()
    # Its next try, in a region that runs workers, makes them.
    runner = MirrorSupervisor("west", lambda c: recorder, clock, is_active=lambda: True)  # type: ignore[arg-type,return-value]
    clock.now += timedelta(hours=1)
    runner.supervise()
    assert ServiceAccount.objects.filter(managed_by_link=made).exists()
    assert the_worker().phase == WorkerPhase.STARTING
