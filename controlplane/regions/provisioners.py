"""What every provisioner does: make a cluster's brokers run, and stop them; and which
one serves a cluster.

A provisioner is chosen per cluster by ``Cluster.provisioner`` (``get_provisioner``).
It starts processes (or pods, or machines) and records where each broker listens on its
``Broker`` row (``regions.services.record_broker_process``); liveness is the
controller's business (heartbeats), not the provisioner's.

The regions app owns the contract and the choice; the implementations live above it in
``controlplane.provisioning``, which registers them (``register_provisioner``) when
Django starts. So region code (deleting a cluster stops its brokers) reaches a
provisioner without importing the code that runs brokers. Another way to run brokers
(Kubernetes, Terraform) is one more class with these methods, one more
``ProvisionerKind`` and one more registration in ``controlplane.provisioning.apps``.

A provisioner also runs a region's **mirror workers** (``python -m mirror``), one
process per mirror link and leg, for the controller that supervises them. The fencing
rule binds every implementation: before it starts a worker it proves the previous
process of the same worker (same ``MirrorWorkerSpec.name``) dead — for the local one,
SIGKILL and wait until the pid is gone — so two processes never write the same target
partitions, not even for a moment. A provisioner that cannot prove it (the ``static``
one runs nothing) does not run workers at all.

Where brokers are stopped: a deleted cluster's brokers are stopped by the
``regions.delete_cluster`` job, in a Celery worker, unless the provisioner is
``stopped_by_controller``: then only the region's controller can reach what runs them
(the Kubernetes API, from the region's namespace), and it stops them on its ticks,
``stop_broker`` returning at once and finishing on a later call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from controlplane.regions.models import Broker, Cluster


class ProvisioningError(Exception):
    """A broker could not be started or stopped; the message says why (for a local
    process, it ends with the tail of its log)."""

    def __init__(self, broker: Broker, message: str) -> None:
        super().__init__(f"{broker}: {message}")
        self.broker = broker
        self.message = message


class ClusterProvisioningError(Exception):
    """What runs a cluster's brokers (the Kubernetes API) could not be reached, refused a
    call or answered nonsense: the cluster's problem, not one broker's. The caller tries
    again later; the message says why."""

    def __init__(self, cluster: Cluster, message: str) -> None:
        super().__init__(f"cluster {cluster}: {message}")
        self.cluster = cluster
        self.message = message


class MirrorWorkerError(Exception):
    """A mirror worker could not be started or stopped; the message says why (for a
    local process, it ends with the tail of its log)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"mirror worker {name}: {message}")
        self.name = name
        self.message = message


@dataclass(frozen=True)
class MirrorWorkerSpec:
    """Which worker to run: ``name`` is stable for a link's leg (``link-7-east-west``)
    and names its folder; ``region`` is where it runs (the leg's target region)."""

    region: str
    name: str
    generation: int


@dataclass(frozen=True)
class MirrorWorkerProcess:
    """Where a started worker runs: its pid, and its status endpoint
    (``http://host:status_port/status``)."""

    pid: int
    host: str
    status_port: int
    data_dir: str


class RunningMirrorWorker(Protocol):
    """What a provisioner needs of a worker it started (a ``MirrorWorker`` row)."""

    pid: int | None
    data_dir: str


class Provisioner(Protocol):
    # Whether only the region's controller can stop the brokers (the module docstring).
    stopped_by_controller: bool
    # Whether it runs mirror workers at all (else ensure_mirror_worker refuses, and no
    # credentials are made for a worker that will not run).
    runs_mirror_workers: bool

    def ensure_broker(self, broker: Broker) -> None:
        """Start ``broker`` unless it runs; on return it serves, and its row holds its
        host, port (and, where meaningful, pid and data directory). Raises
        ``ProvisioningError``, or ``ClusterProvisioningError``."""
        ...

    def ensure_brokers(self, brokers: Sequence[Broker]) -> None:
        """``ensure_broker`` for each, started together where the provisioner can;
        raises the first ``ProvisioningError`` after trying them all, or
        ``ClusterProvisioningError`` at once. Brokers found stopping or stopped (a
        deletion since the caller read them) are left alone."""
        ...

    def stop_broker(self, broker: Broker) -> None:
        """Stop ``broker`` cleanly if it runs (idempotent): on return it is ``stopped``,
        or, for a provisioner ``stopped_by_controller``, ``stopping`` until a later call
        finds it gone. Raises ``ProvisioningError``, or ``ClusterProvisioningError``."""
        ...

    def is_running(self, broker: Broker) -> bool:
        """Whether ``broker``'s process (as far as this provisioner can tell) runs."""
        ...

    def ensure_mirror_worker(
        self,
        spec: MirrorWorkerSpec,
        config: Mapping[str, Any],
        secret: str | None,
        previous: RunningMirrorWorker | None = None,
    ) -> MirrorWorkerProcess:
        """Start a worker of ``spec`` with ``config`` (the worker's JSON configuration;
        ``secret``, the client secret its credentials name, is kept in a private file of
        its own), after proving any earlier process of the same worker — ``previous``,
        or one found in its folder — dead (the fencing rule above). Returns once it
        serves its status. Raises ``MirrorWorkerError``."""
        ...

    def stop_mirror_worker(self, worker: RunningMirrorWorker) -> None:
        """Kill ``worker`` and return once it is gone (idempotent)."""
        ...

    def mirror_worker_running(self, worker: RunningMirrorWorker) -> bool:
        """Whether ``worker``'s process runs."""
        ...


class UnknownProvisionerError(LookupError):
    """No provisioner is registered for a cluster's ``provisioner`` kind."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"no provisioner is registered for kind {kind!r}")
        self.kind = kind


_factories: dict[str, Callable[[], Provisioner]] = {}
# One instance per kind and process: a ``LocalProvisioner`` remembers the processes it
# started, to reap them.
_instances: dict[str, Provisioner] = {}
_lock = threading.Lock()


def register_provisioner(kind: str, factory: Callable[[], Provisioner]) -> None:
    """Make ``factory`` build the provisioner of clusters of ``kind`` (idempotent)."""
    with _lock:
        if _factories.get(kind) is not factory:
            _factories[kind] = factory
            _instances.pop(kind, None)


def get_provisioner(cluster: Cluster) -> Provisioner:
    """The provisioner of ``cluster``; ``UnknownProvisionerError`` for a kind nobody
    registered."""
    kind = str(cluster.provisioner)
    with _lock:
        if kind not in _instances:
            if kind not in _factories:
                raise UnknownProvisionerError(kind)
            _instances[kind] = _factories[kind]()
        return _instances[kind]
