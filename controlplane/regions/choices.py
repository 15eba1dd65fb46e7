from django.db import models


class BrokerPhase(models.TextChoices):
    """pending (desired, not started) -> starting -> ready <-> unreachable;
    stopping -> stopped."""

    PENDING = "pending"
    STARTING = "starting"
    READY = "ready"
    UNREACHABLE = "unreachable"
    STOPPING = "stopping"
    STOPPED = "stopped"


class ProvisionerKind(models.TextChoices):
    """Who starts a cluster's brokers: ``local`` processes on this host, or ``static``
    (started elsewhere, registered by address)."""

    LOCAL = "local"
    STATIC = "static"
