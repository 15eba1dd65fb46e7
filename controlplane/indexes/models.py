"""Secondary indexes: what a tenant declares (``Index``) and each Spark build of it
(``IndexBuild``, a ``JobRun`` as an export's run)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from controlplane.core.models import TimestampedModel
from controlplane.core.validators import slug_validator
from controlplane.exports import fields as field_rules
from controlplane.exports.choices import ValueFormat
from controlplane.exports.models import JobRun
from controlplane.indexes.query import RESERVED_PARAMS

MAX_INDEX_FIELDS = 8


class Index(TimestampedModel):
    """A tenant's secondary index of one topic (``spark.jobs.spec.IndexSpec``): the
    fields (1 to ``MAX_INDEX_FIELDS``) read from its JSON values, and whether lane topics
    are included; no field takes a query parameter's name (``query.RESERVED_PARAMS``):
    the query names the field it looks up as a parameter. Its files live where the
    platform puts them (``services.index_target``: by ids, never names). The fields and
    the topic are the index's identity: to index other fields, declare another index."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="indexes")
    name = models.CharField(max_length=32, validators=[slug_validator])
    description = models.CharField(max_length=500, blank=True, default="")
    topic = models.ForeignKey("topics.Topic", on_delete=models.CASCADE, related_name="indexes")
    value_format = models.CharField(
        max_length=8, choices=[(ValueFormat.JSON.value, ValueFormat.JSON.label)],
        default=ValueFormat.JSON,
    )  # fmt: skip
    fields = models.JSONField(default=list)
    include_lanes = models.BooleanField(default=False)
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="index_unique_name")]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    def clean(self) -> None:
        super().clean()
        problems = field_rules.field_problems(
            self.fields, min_fields=1, max_fields=MAX_INDEX_FIELDS, reserved=RESERVED_PARAMS
        )
        if problems:
            raise ValidationError({"fields": problems})

    @property
    def field_names(self) -> list[str]:
        return [f["name"] for f in self.fields]


class IndexBuild(JobRun):
    index = models.ForeignKey(Index, on_delete=models.CASCADE, related_name="builds")

    class Meta:
        ordering = ["index", "-queued_at", "-id"]

    def __str__(self) -> str:
        return f"{self.index} build {self.pk}"
