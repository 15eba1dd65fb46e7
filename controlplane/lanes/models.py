from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from controlplane.core.models import TimestampedModel
from controlplane.lanes.choices import OrphanPolicy
from lanes.names import LANE_NAME_RE, LANE_NAME_RULE

lane_name_validator = RegexValidator(LANE_NAME_RE, LANE_NAME_RULE)


def default_ttl_s() -> int:
    return int(settings.LANE_DEFAULT_TTL_S)


class Lane(TimestampedModel):
    """A tenant's lane (``lanes.model.LaneSpec``): which trunk topics it covers
    (``all_topics``, else ``topics``), whether its consumers read the trunk too, its
    orphan policy, how long it and its lane topics live without traffic (``ttl_s``) and
    its lane topics' partition count (null: each trunk's; never more than a trunk's).

    What the brokers report is kept here by the controller: ``live_topics`` (trunk full
    names some consumer group of the lane consumes now, or did within
    ``settings.LANE_ORPHAN_AFTER_S``; ``live_seen`` says when each was last reported),
    ``last_live_at`` (when that set was last non-empty) and ``last_traffic_at`` (the
    latest append, fetch or demand of any of its lane topics). The timestamps move
    forward in steps (``services.touch_step``), not on every report."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="lanes")
    name = models.CharField(max_length=32, validators=[lane_name_validator])
    all_topics = models.BooleanField(default=True)
    topics = models.ManyToManyField("topics.Topic", blank=True, related_name="covering_lanes")
    consume_trunk = models.BooleanField(default=False)
    orphan_policy = models.CharField(
        max_length=8, choices=OrphanPolicy.choices, default=OrphanPolicy.TRUNK
    )
    ttl_s = models.PositiveIntegerField(default=default_ttl_s, validators=[MinValueValidator(1)])
    partitions = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    last_traffic_at = models.DateTimeField(null=True, blank=True)
    last_live_at = models.DateTimeField(null=True, blank=True)
    live_topics = models.JSONField(default=list, blank=True)
    # When each of ``live_topics`` was last seen in a report (trunk full name -> ISO
    # time), so a lane stays live through a consumer's restart (``LANE_ORPHAN_AFTER_S``).
    live_seen = models.JSONField(default=dict, blank=True)
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="lane_unique_name")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class LaneTopic(models.Model):
    """A lane topic (a ``topics.Topic`` with a trunk) of a lane, and when the brokers
    last saw traffic on it (append or fetch; null: none yet), which the GC reads."""

    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="lane_topics")
    topic = models.OneToOneField("topics.Topic", on_delete=models.CASCADE, related_name="lane_link")
    last_traffic_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["topic__full_name"]

    def __str__(self) -> str:
        return self.topic.full_name
