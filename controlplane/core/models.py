"""Shared model bases and the audit log."""

from __future__ import annotations

from django.db import models


class TimestampedModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class StatusModel(TimestampedModel):
    """A desired-state object whose provisioning progress is shown to its owner:
    ``status`` (a ``ProvisioningStatus``) and ``status_reason`` (why it failed)."""

    status = models.CharField(max_length=16, default="pending")
    status_reason = models.TextField(blank=True, default="")

    class Meta:
        abstract = True


class AuditEvent(models.Model):
    """One change to the desired state: who, what, when, before and after. Written by
    the service function that made the change, in the same transaction."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=255, help_text="token subject, or 'system:<part>'")
    actor_name = models.CharField(max_length=255, blank=True, default="")
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    tenant_slug = models.CharField(max_length=64, blank=True, default="", db_index=True)
    action = models.CharField(max_length=64, db_index=True, help_text="e.g. topic.create")
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=255)
    object_repr = models.CharField(max_length=255)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.object_repr} by {self.actor}"
