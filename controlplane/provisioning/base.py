"""What every provisioner does: make a cluster's brokers run, and stop them.

A provisioner is chosen per cluster by ``Cluster.provisioner`` (``get_provisioner``).
It starts processes (or pods, or machines) and records where each broker listens on its
``Broker`` row (``regions.services.record_broker_process``); liveness is the
controller's business (heartbeats), not the provisioner's. Another way to run brokers
(Kubernetes, Terraform) is one more class with these methods, one more
``ProvisionerKind`` and one more entry in ``controlplane.provisioning.PROVISIONERS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from controlplane.regions.models import Broker


class ProvisioningError(Exception):
    """A broker could not be started or stopped; the message says why (for a local
    process, it ends with the tail of its log)."""

    def __init__(self, broker: Broker, message: str) -> None:
        super().__init__(f"{broker}: {message}")
        self.broker = broker
        self.message = message


class Provisioner(Protocol):
    def ensure_broker(self, broker: Broker) -> None:
        """Start ``broker`` unless it runs; on return it serves, and its row holds its
        host, port (and, where meaningful, pid and data directory). Raises
        ``ProvisioningError``."""
        ...

    def ensure_brokers(self, brokers: Sequence[Broker]) -> None:
        """``ensure_broker`` for each, started together where the provisioner can;
        raises the first ``ProvisioningError`` after trying them all."""
        ...

    def stop_broker(self, broker: Broker) -> None:
        """Stop ``broker`` cleanly if it runs (idempotent)."""
        ...

    def is_running(self, broker: Broker) -> bool:
        """Whether ``broker``'s process (as far as this provisioner can tell) runs."""
        ...
