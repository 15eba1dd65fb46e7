from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models

from controlplane.core.models import TimestampedModel


class Quota(TimestampedModel):
    """A tenant's limits (DESIGN decision 8). Counts and reserved storage are enforced by
    the control plane when topics are created or grown; rates (0: unlimited) and the
    stored bytes the brokers report are pushed to the brokers, which throttle and refuse
    produce past ``max_storage_bytes`` (``services.tenant_quotas``)."""

    tenant = models.OneToOneField("tenants.Tenant", on_delete=models.CASCADE, related_name="quota")
    max_topics = models.PositiveIntegerField(validators=[MinValueValidator(0)])
    max_partitions = models.PositiveIntegerField()
    max_storage_bytes = models.PositiveBigIntegerField()
    produce_bytes_per_s = models.PositiveBigIntegerField()
    fetch_bytes_per_s = models.PositiveBigIntegerField()
    requests_per_s = models.PositiveIntegerField()
    max_lanes = models.PositiveIntegerField()
    max_mirrors = models.PositiveIntegerField()
    max_exports = models.PositiveIntegerField()
    max_indexes = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"quota of {self.tenant.slug}"
