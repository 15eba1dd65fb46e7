"""The audit log: every service function that changes desired state records who did
what, before and after, in its own transaction."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.forms.models import model_to_dict

from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent

# Secrets: hashes, keys, passwords, a cluster's object store options (credentials).
_HIDDEN = {"secret_hash", "sealed_private_key", "password", "remote_store_options"}


def snapshot(obj: models.Model | None) -> dict[str, Any] | None:
    """A JSON-able picture of a row's own fields (secrets left out)."""
    if obj is None:
        return None
    data = model_to_dict(obj)
    for f in obj._meta.concrete_fields:
        if not f.editable and f.name not in data:
            data[f.name] = getattr(obj, f.attname)
    return {k: _jsonable(v) for k, v in data.items() if k not in _HIDDEN}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, models.Model):
        return value.pk
    return str(value)


def record(
    actor: Actor,
    action: str,
    obj: models.Model,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    tenant: Any = None,
) -> AuditEvent:
    """Write one audit event; call it inside the change's transaction."""
    return record_about(
        actor,
        action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        object_repr=str(obj),
        before=before,
        after=after,
        tenant=tenant,
    )


def record_about(
    actor: Actor,
    action: str,
    *,
    object_type: str,
    object_id: str,
    object_repr: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    tenant: Any = None,
) -> AuditEvent:
    """Write one audit event about an object the brokers keep rather than a row (a
    consumer group); call it inside the change's transaction."""
    tenant_slug = getattr(tenant, "slug", "") if tenant is not None else ""
    return AuditEvent.objects.create(
        actor=actor.subject,
        actor_name=actor.name,
        tenant=tenant if tenant is not None and tenant.pk else None,
        tenant_slug=tenant_slug,
        action=action,
        object_type=object_type,
        object_id=object_id,
        object_repr=(object_repr or object_id)[:255],
        before=before,
        after=after,
    )
