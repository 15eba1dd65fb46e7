"""Provisioners: who starts a cluster's brokers (see ``base.Provisioner``).

``get_provisioner(cluster)`` returns the one its ``Cluster.provisioner`` names, one
instance per kind and process (a ``LocalProvisioner`` remembers the processes it
started, to reap them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from controlplane.provisioning.base import Provisioner, ProvisioningError
from controlplane.provisioning.local import LocalProvisioner
from controlplane.provisioning.static import StaticProvisioner
from controlplane.regions.choices import ProvisionerKind
from controlplane.regions.models import Cluster

PROVISIONERS: dict[str, Callable[[], Provisioner]] = {
    ProvisionerKind.LOCAL: LocalProvisioner,
    ProvisionerKind.STATIC: StaticProvisioner,
}

_instances: dict[str, Provisioner] = {}
_lock = threading.Lock()


def get_provisioner(cluster: Cluster) -> Provisioner:
    """The provisioner of ``cluster``; ``KeyError`` for a kind nobody implements."""
    kind = str(cluster.provisioner)
    with _lock:
        if kind not in _instances:
            _instances[kind] = PROVISIONERS[kind]()
        return _instances[kind]


__all__ = [
    "PROVISIONERS",
    "LocalProvisioner",
    "Provisioner",
    "ProvisioningError",
    "StaticProvisioner",
    "get_provisioner",
]
