"""``MirrorSupervisor``: the controller's care of its region's mirror workers.

The workers of a region are those of every mirror link leg whose *to* region it is
(``mirrors.services.desired_workers``). One supervision round:

1. **Desired vs running** (``mirrors.workers.desired_workers``). A desired worker that
   does not run is started; one whose configuration changed (``WorkerSpec.config_hash``)
   is stopped and started again. At a start the configuration is completed with what
   only the controller holds: the brokers of both regions (from the database: the
   clusters the spec names; tenants never see another region's addresses), TLS, the
   worker's identity (``mirrors.identity.worker_credentials``, a new secret per start,
   which the provisioner keeps in a private file) and a new ``generation``; the
   provisioner proves the previous process dead first (the fencing rule of
   ``regions.provisioners``). Two controllers of a region never both start it: the
   start takes the next ``generation`` by compare-and-set on the worker's row (locked),
   only while this controller still holds the region (``holds_lease``: its lease, and
   the region's epoch still its own), and checks that again right before the
   provisioner fences and spawns; ``LocalProvisioner`` also locks the worker's folder
   from the fence to the ready file.
2. **Status.** Each running worker's ``GET /status`` is read with a short timeout
   (``MIRROR_STATUS_TIMEOUT_S``) and stored (``mirrors.progress.record_status``). A
   worker whose status has been unreadable for ``MIRROR_WORKER_TIMEOUT_S`` (hung,
   stopped, cut off) is ``unreachable``, then killed and replaced. A start that fails
   (``failed``, with the provisioner's reason) is tried again after that long too.
3. **Retired workers.** A worker no longer desired is stopped: a paused link's row is
   kept (``stopped``); a deleted link's row is removed, and the link itself once its last
   worker is gone (``mirrors.services.finish_deletion``).
4. **Health.** ``mirrors.progress.evaluate_health`` for each link with a leg here, and
   the copies follow their origins (``mirrors.services.follow_origins``).

A round runs on a thread of its own (``tick`` starts one when none runs), so starting a
slow worker never delays the brokers' metadata pushes and heartbeats; a round begun
by a controller that stepped down meanwhile does nothing more than finish its current
step.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from controlplane.accounts import internal
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import scrub_addresses
from controlplane.mirrors import identity, progress
from controlplane.mirrors import services as mirror_services
from controlplane.mirrors.choices import WorkerPhase
from controlplane.mirrors.models import MirrorLink, MirrorWorker
from controlplane.mirrors.workers import WorkerSpec, desired_workers
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.regions.provisioners import (
    MirrorWorkerError,
    MirrorWorkerSpec,
    Provisioner,
)

log = logging.getLogger(__name__)

ACTOR = Actor.system("controller")
# Brokers that are not part of a cluster any more: never a bootstrap address.
_GONE = (BrokerPhase.STOPPED, BrokerPhase.DECOMMISSIONED)


class MirrorSupervisor:
    """See the module docstring. ``tick`` is called by the controller's thread; a round
    runs on the supervisor's own thread, one at a time."""

    def __init__(
        self,
        region_name: str,
        provisioner_for: Callable[[Cluster], Provisioner],
        clock: Callable[[], datetime],
        is_active: Callable[[], bool],
        holds_lease: Callable[[], bool] | None = None,
    ) -> None:
        self.region_name = region_name
        self.provisioner_for = provisioner_for
        self.clock = clock
        self.is_active = is_active
        # The strict check made right before a worker starts (the lease still held, the
        # region still naming this controller's epoch); the cheap flag otherwise.
        self.holds_lease = holds_lease or is_active
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="mirrors")
        self._round: Future[None] | None = None
        self._since = clock()
        # MirrorWorker pk -> when this controller last started its process.
        self._started_at: dict[int, datetime] = {}

    def tick(self) -> None:
        """Start a round unless one runs; report how the last one ended."""
        if self._round is not None and not self._round.done():
            return
        if self._round is not None and (error := self._round.exception()) is not None:
            log.error("mirror supervision failed: %r", error, exc_info=error)
        self._round = self._executor.submit(self._round_on_thread)

    def reset(self) -> None:
        """Forget what an earlier term saw (on taking over)."""
        self._since = self.clock()
        self._started_at.clear()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def _round_on_thread(self) -> None:
        """A round with a database connection of its own, closed after it: an idle
        thread must not hold a session open."""
        close_old_connections()
        try:
            self.supervise()
        finally:
            connection.close()

    # -- one round --------------------------------------------------------------------------
    def supervise(self) -> None:
        """One round (module docstring), in the calling thread."""
        desired = {(s.link_id, s.from_region_id): s for s in desired_workers(self.region_name)}
        workers = MirrorWorker.objects.filter(to_region__name=self.region_name)
        rows = {(w.link_id, w.from_region_id): w for w in workers.select_related("link")}
        for key, spec in desired.items():
            if not self.is_active():
                return
            self._keep(spec, rows.get(key))
        for key, worker in rows.items():
            if key not in desired and self.is_active():
                self._retire(worker)
        if self.is_active():
            self._judge_links()

    def _keep(self, spec: WorkerSpec, worker: MirrorWorker | None) -> None:
        """Start, restart or read the status of the worker of ``spec``."""
        if worker is None:
            worker, _ = MirrorWorker.objects.select_related("link").get_or_create(
                link_id=spec.link_id, from_region_id=spec.from_region_id,
                defaults={"to_region_id": spec.to_region_id},
            )  # fmt: skip
        provisioner = self._provisioner(spec.target_cluster_id)
        if provisioner is None:
            return
        running = provisioner.mirror_worker_running(worker)
        failed = worker.phase == WorkerPhase.FAILED and not running
        if failed and self._silent_for(worker) <= settings.MIRROR_WORKER_TIMEOUT_S:
            return  # its start failed a moment ago: try again later, not every tick
        if running and worker.config_hash == spec.config_hash:
            self._watch(provisioner, spec, worker)
            return
        if running:
            log.info("mirror worker %s: configuration changed, restarting", worker)
            _update(worker, phase=WorkerPhase.STOPPING, phase_reason="configuration changed")
            provisioner.stop_mirror_worker(worker)
        elif worker.pid is not None:
            log.warning("mirror worker %s: process %s is not running, restarting",
                        worker, worker.pid)  # fmt: skip
        self._start(provisioner, spec, worker)

    def _watch(self, provisioner: Provisioner, spec: WorkerSpec, worker: MirrorWorker) -> None:
        status = read_status(worker.host, worker.status_port)
        if status is not None and progress.record_status(worker, status):
            if worker.phase != WorkerPhase.RUNNING:
                _update(worker, phase=WorkerPhase.RUNNING, phase_reason="")
            return
        silent = self._silent_for(worker)
        if silent <= settings.MIRROR_WORKER_TIMEOUT_S:
            return
        reason = f"status unreadable for {silent:.0f} s: killed and replaced"
        log.warning("mirror worker %s: %s", worker, reason)
        _update(worker, phase=WorkerPhase.UNREACHABLE, phase_reason=reason)
        self._start(provisioner, spec, worker)

    def _silent_for(self, worker: MirrorWorker) -> float:
        seen = [worker.last_status_at, self._started_at.get(worker.pk), self._since]
        latest = max(t for t in seen if t is not None)
        return float((self.clock() - latest) / timedelta(seconds=1))

    def _start(self, provisioner: Provisioner, spec: WorkerSpec, worker: MirrorWorker) -> None:
        generation = self._claim(worker)
        if generation is None:
            return
        place = MirrorWorkerSpec(self.region_name, worker_name(spec), generation)
        self._started_at[worker.pk] = self.clock()
        try:
            if provisioner.runs_mirror_workers:
                config, secret = self.config_of(spec, worker.link, generation)
            else:  # it refuses below: no worker credentials are made (or rotated) for it
                config, secret = {}, None
            if not self.holds_lease():
                log.warning("mirror worker %s: not started, this controller was deposed", worker)
                return
            process = provisioner.ensure_mirror_worker(place, config, secret, previous=worker)
        except MirrorWorkerError as exc:
            log.error("%s", exc)
            reason = scrub_addresses(exc.message)[:2000]
            _update(worker, pid=None, phase=WorkerPhase.FAILED, phase_reason=reason)
            return
        _update(
            worker,
            generation=generation,
            pid=process.pid,
            host=process.host,
            status_port=process.status_port,
            data_dir=process.data_dir,
            config_hash=spec.config_hash,
            phase=WorkerPhase.STARTING,
            phase_reason="",
        )
        log.info("mirror worker %s runs as pid %d", worker, process.pid)

    def _claim(self, worker: MirrorWorker) -> int | None:
        """The generation of the worker's next start, set on its row when the row still
        holds the generation this controller read and it still holds the region's lease
        (compare-and-set under the row's lock); None otherwise: another controller
        started the worker meanwhile, or this one was deposed."""
        with transaction.atomic():
            row = MirrorWorker.objects.select_for_update().filter(pk=worker.pk).first()
            if row is None or row.generation != worker.generation or not self.holds_lease():
                log.warning("mirror worker %s: not started, another controller acts on it",
                            worker)  # fmt: skip
                return None
            generation = row.generation + 1
            MirrorWorker.objects.filter(pk=worker.pk).update(generation=generation)
        worker.generation = generation
        return generation

    def _retire(self, worker: MirrorWorker) -> None:
        """Stop a worker no longer desired. A paused link's row stays (``stopped``, so
        its generations go on counting when it resumes); a deleted link's goes, and the
        link is deleted once that was its last worker."""
        deleting = worker.link.status == ProvisioningStatus.DELETING
        if worker.phase == WorkerPhase.STOPPED and not deleting:
            return
        provisioner = self._provisioner(None)
        if provisioner is not None:
            provisioner.stop_mirror_worker(worker)
        self._started_at.pop(worker.pk, None)
        link = worker.link
        if not deleting:
            _update(worker, pid=None, phase=WorkerPhase.STOPPED, phase_reason="the link is paused")
            log.info("mirror worker %s stopped: the link is paused", worker)
            return
        worker.delete()
        log.info("mirror worker of %s from region %d stopped", link, worker.from_region_id)
        mirror_services.finish_deletion(link, actor=ACTOR)

    def _judge_links(self) -> None:
        region = Region.objects.get(name=self.region_name)
        mirror_services.finish_deletions(region, actor=ACTOR)  # those that had no worker here
        mirror_services.follow_origins(region, actor=ACTOR)
        for link in MirrorLink.objects.filter(workers__to_region=region).distinct():
            progress.evaluate_health(link)

    # -- where and with what ----------------------------------------------------------------
    def _provisioner(self, cluster_id: int | None) -> Provisioner | None:
        """The provisioner of the cluster (default: the region's first)."""
        clusters = Cluster.objects.filter(region__name=self.region_name)
        if cluster_id is not None:
            clusters = clusters.filter(pk=cluster_id)
        cluster = clusters.order_by("pk").first()
        return self.provisioner_for(cluster) if cluster is not None else None

    def config_of(
        self, spec: WorkerSpec, link: MirrorLink, generation: int
    ) -> tuple[dict[str, Any], str | None]:
        """The worker's whole configuration and its secret: ``spec.config`` with the
        brokers of both regions, TLS, credentials and the generation."""
        tls = settings.BROKER_TLS_CA_FILE or None
        config = {
            **spec.config,
            "generation": generation,
            "source": {"bootstrap": bootstrap(spec.source_cluster_id), "tls_ca_file": tls},
            "target": {"bootstrap": bootstrap(spec.target_cluster_id), "tls_ca_file": tls},
            "credentials": None,
        }
        if not settings.BROKER_AUTH:
            return config, None
        from_region = Region.objects.get(pk=spec.from_region_id)
        client_id, secret = identity.worker_credentials(link, from_region, actor=ACTOR)
        config["credentials"] = {"token_url": internal.token_url(), "client_id": client_id}
        return config, secret


def _update(worker: MirrorWorker, **fields: Any) -> None:
    """Record what became of the worker (its row and the object)."""
    MirrorWorker.objects.filter(pk=worker.pk).update(**fields)
    for name, value in fields.items():
        setattr(worker, name, value)


def worker_name(spec: WorkerSpec) -> str:
    """The stable name of a leg's worker (its folder and log)."""
    return f"link-{spec.link_id}-{spec.from_region}-{spec.to_region}"


def bootstrap(cluster_id: int | None) -> list[str]:
    """Every broker of the cluster with an address (not only the live ones: the list
    must serve whichever of them is up when the worker (re)connects)."""
    if cluster_id is None:
        return []
    brokers = Broker.objects.filter(cluster_id=cluster_id).exclude(phase__in=_GONE)
    return [b.address for b in brokers.order_by("broker_id") if b.address]


def read_status(host: str, port: int | None) -> dict[str, Any] | None:
    """A worker's ``GET /status``, or None when it cannot be read within
    ``MIRROR_STATUS_TIMEOUT_S``."""
    if not host or not port:
        return None
    url = f"http://{host}:{port}/status"
    try:
        with urllib.request.urlopen(url, timeout=settings.MIRROR_STATUS_TIMEOUT_S) as answer:
            document = json.loads(answer.read(4 * 1024 * 1024))
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return document if isinstance(document, dict) else None
