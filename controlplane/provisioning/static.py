"""``StaticProvisioner``: brokers run elsewhere (started by their operators) and are
registered by address (``regions.services.register_broker``); there is nothing to start
or stop, and whether they run is known only from the controller's heartbeats.

Mirror workers are not run here: a worker must be fenced (its predecessor proven dead
before it starts), which only whoever runs the processes can do. A link whose target
region's clusters are ``static`` stays without workers, its ``MirrorWorker`` in phase
``failed`` with ``NO_MIRROR_WORKERS`` as the reason."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.regions.models import Broker
from controlplane.regions.provisioners import (
    MirrorWorkerError,
    MirrorWorkerProcess,
    MirrorWorkerSpec,
    RunningMirrorWorker,
)

log = logging.getLogger(__name__)

NO_MIRROR_WORKERS = (
    "the region's clusters are static (run elsewhere): the control plane starts no "
    "mirror workers there; run the region's clusters with the local provisioner"
)


class StaticProvisioner:
    stopped_by_controller = False  # nothing to stop
    runs_mirror_workers = False

    def ensure_broker(self, broker: Broker) -> None:
        """Nothing to start; a broker without an address waits for its registration."""

    def ensure_brokers(self, brokers: Sequence[Broker]) -> None:
        """Nothing to start."""

    def stop_broker(self, broker: Broker) -> None:
        log.info("%s runs outside the control plane: stop it where it runs", broker)

    def is_running(self, broker: Broker) -> bool:
        """Unknown here: a registered broker is presumed to run (heartbeats tell)."""
        return bool(broker.port)

    def ensure_mirror_worker(
        self,
        spec: MirrorWorkerSpec,
        config: Mapping[str, Any],
        secret: str | None,
        previous: RunningMirrorWorker | None = None,
    ) -> MirrorWorkerProcess:
        raise MirrorWorkerError(spec.name, NO_MIRROR_WORKERS)

    def stop_mirror_worker(self, worker: RunningMirrorWorker) -> None:
        """Nothing runs here."""

    def mirror_worker_running(self, worker: RunningMirrorWorker) -> bool:
        return False
