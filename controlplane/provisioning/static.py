"""``StaticProvisioner``: brokers run elsewhere (started by their operators) and are
registered by address (``regions.services.register_broker``); there is nothing to start
or stop, and whether they run is known only from the controller's heartbeats."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from controlplane.regions.models import Broker

log = logging.getLogger(__name__)


class StaticProvisioner:
    def ensure_broker(self, broker: Broker) -> None:
        """Nothing to start; a broker without an address waits for its registration."""

    def ensure_brokers(self, brokers: Sequence[Broker]) -> None:
        """Nothing to start."""

    def stop_broker(self, broker: Broker) -> None:
        log.info("%s runs outside the control plane: stop it where it runs", broker)

    def is_running(self, broker: Broker) -> bool:
        """Unknown here: a registered broker is presumed to run (heartbeats tell)."""
        return bool(broker.port)
