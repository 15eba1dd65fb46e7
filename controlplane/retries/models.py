from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from controlplane.core.models import TimestampedModel
from dataplane.delays import MAX_DELAY_MS, MIN_DELAY_MS

# The part of a group id after "<tenant>.": what its retry and dead-letter topics are
# named by (``<group>.retry``, ``<group>.dlq``), so a topic name's characters.
GROUP_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,150}$"
group_name_validator = RegexValidator(
    GROUP_NAME_RE,
    "1-151 characters: letters, digits, '.', '_' and '-', starting with a letter or digit",
)
MAX_ATTEMPTS = 100


class RetryPolicy(TimestampedModel):
    """How the consumer group ``<tenant>.<group>`` retries records (docs/delay.md): at
    most ``max_attempts`` deliveries of a record, the n-th retry after
    ``backoff_initial_ms * backoff_multiplier ** (n - 1)`` (at most ``backoff_max_ms``)
    unless the consumer names a delay. Its records come back on ``retry_topic``
    (``<group id>.retry``) and end in ``dead_letter_topic`` (``<group id>.dlq``), both
    made with the policy (ordinary topics of the tenant, counted against its quotas)
    and deleted with it. The brokers learn the policies from the controller's push."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.PROTECT, related_name="retry_policies"
    )
    group = models.CharField(max_length=151, validators=[group_name_validator])
    max_attempts = models.PositiveSmallIntegerField(
        default=16, validators=[MinValueValidator(1), MaxValueValidator(MAX_ATTEMPTS)]
    )
    backoff_initial_ms = models.PositiveBigIntegerField(
        default=10_000,
        validators=[MinValueValidator(MIN_DELAY_MS), MaxValueValidator(MAX_DELAY_MS)],
    )
    backoff_multiplier = models.FloatField(
        default=2.0, validators=[MinValueValidator(1.0), MaxValueValidator(10.0)]
    )
    backoff_max_ms = models.PositiveBigIntegerField(
        default=3_600_000,
        validators=[MinValueValidator(MIN_DELAY_MS), MaxValueValidator(MAX_DELAY_MS)],
    )
    retry_topic = models.ForeignKey(
        "topics.Topic", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    dead_letter_topic = models.ForeignKey(
        "topics.Topic", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["tenant", "group"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "group"], name="retry_policy_unique_group")
        ]

    def __str__(self) -> str:
        return self.group_id

    @property
    def group_id(self) -> str:
        return f"{self.tenant.slug}.{self.group}"

    def clean(self) -> None:
        super().clean()
        if (
            isinstance(self.backoff_max_ms, int)
            and isinstance(self.backoff_initial_ms, int)
            and self.backoff_max_ms < self.backoff_initial_ms
        ):
            raise ValidationError({"backoff_max_ms": ["at least backoff_initial_ms"]})
