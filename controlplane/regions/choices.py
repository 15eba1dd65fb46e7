from django.db import models


class BrokerPhase(models.TextChoices):
    """pending (desired, not started) -> starting -> ready <-> unreachable;
    stopping -> stopped; decommissioning (its replicas are being moved away, it still
    serves) -> decommissioned (it holds nothing; its process is stopped)."""

    PENDING = "pending"
    STARTING = "starting"
    READY = "ready"
    UNREACHABLE = "unreachable"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DECOMMISSIONING = "decommissioning"
    DECOMMISSIONED = "decommissioned"


class ProvisionerKind(models.TextChoices):
    """Who starts a cluster's brokers: ``local`` processes on this host, ``static``
    (started elsewhere, registered by address), or ``kubernetes`` (the pods of a
    StatefulSet the control plane sizes)."""

    LOCAL = "local"
    STATIC = "static"
    KUBERNETES = "kubernetes"
