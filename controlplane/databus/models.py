"""Databus on the control plane: the configurations tenants declare for their sidecar
agents (``DatabusConfig``), and what each running agent last reported (``DatabusAgent``).

A configuration's ``document`` is the JSON document ``databus.config.parse_config``
accepts, stored normalised (``DatabusConfig.to_json()``: every stream with every
setting, defaults filled in), so what an agent is served is exactly what was checked.
``version`` starts at 1 and grows by one at every change of the document (a change of
the description alone keeps it): agents watch it (``ETag``)."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models

from controlplane.core.models import TimestampedModel
from controlplane.core.validators import slug_validator


class DatabusConfig(TimestampedModel):
    """A tenant's named Databus configuration (see the module docstring)."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="databus_configs"
    )
    name = models.CharField(max_length=32, validators=[slug_validator])
    description = models.CharField(max_length=500, blank=True, default="")
    document = models.JSONField(default=dict)
    version = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="databus_config_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class DatabusAgent(TimestampedModel):
    """A running agent as its last heartbeat described it: the configuration it runs
    (by name: it may report one deleted since) at ``version`` (0: none applied yet), its
    host and process, when it started, its per-stream counters (``stats``, bounded by
    ``services.MAX_STATS_BYTES``) and ``principal``, the immutable id of who reported it
    (a service account's ``uid``, else the token's subject). ``last_seen`` is when the
    last heartbeat arrived; agents silent for ``services.FORGET_AFTER`` are forgotten."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="databus_agents"
    )
    agent_id = models.UUIDField()
    config_name = models.CharField(max_length=64)
    version = models.PositiveIntegerField(default=0)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    stats = models.JSONField(default=dict)
    principal = models.CharField(max_length=255)

    class Meta:
        ordering = ["tenant", "config_name", "hostname", "agent_id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "agent_id"], name="databus_agent_unique_id")
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.agent_id}"
