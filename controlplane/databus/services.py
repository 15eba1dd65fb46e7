"""Changing a tenant's Databus configurations, and what its agents report.

``create_databus_config``, ``update_databus_config`` and ``delete_databus_config`` are
atomic, take the acting ``Actor`` and write their audit event in the same transaction.
A document is checked in two steps, and refused with ``InvalidRequest`` whose details
name the field under ``document`` exactly as the schema does
(``{"document": {"streams.clicks.linger_ms": ["must be ..."]}}``):

1. the schema, ``databus.config.parse_config`` (the one definition of a valid
   document, which the agent applies too);
2. the tenant: every stream's ``topic`` is a trunk topic of the tenant (not being
   deleted; another tenant's topic is answered like a missing one), and its ``lane``,
   when set, a lane the tenant declares that covers that topic.

Agents report with ``record_agent_heartbeat`` (an upsert, not audited: it is
telemetry, not desired state); ``forget_silent_agents`` drops those silent for
``FORGET_AFTER``.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest, PermissionDenied
from controlplane.core.validators import SLUG_RE, slug_validator
from controlplane.databus.models import DatabusAgent, DatabusConfig
from controlplane.lanes.models import Lane
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import Topic
from databus.config import STREAM_NAME_RE, ConfigError, StreamConfig, parse_config

# An agent is live while its last heartbeat is this recent; forgotten after FORGET_AFTER.
LIVE_WITHIN = timedelta(seconds=60)
FORGET_AFTER = timedelta(days=7)
# The per-stream counters a heartbeat carries, and their types.
STAT_FIELDS: dict[str, type] = {
    "records_in": int,
    "records_out": int,
    "bytes_in": int,
    "bytes_out": int,
    "spool_records": int,
    "spool_bytes": int,
    "spool_age_s": float,
    "dropped": int,
    "rejected": int,
}
MAX_STATS_STREAMS = 1000  # databus.config.MAX_STREAMS
MAX_STATS_BYTES = 256 * 1024  # the stats as stored (compact JSON)
MAX_COUNTER = 2**63 - 1


# -- configurations ------------------------------------------------------------------------
@transaction.atomic
def create_databus_config(
    tenant: Tenant, *, name: str, document: Any, description: str = "", actor: Actor
) -> DatabusConfig:
    """A new configuration ``name`` of ``tenant`` at version 1. Refuses a bad name,
    description or document (``InvalidRequest`` naming the field; see the module
    docstring), a name in use or a tenant being deleted (``Conflict``)."""
    tenant = lock_open_tenant(tenant)
    _check_name(name)
    normalised = checked_document(tenant, document)
    if DatabusConfig.objects.filter(tenant=tenant, name=name).exists():
        raise Conflict(
            f"Databus configuration {name!r} already exists in tenant {tenant.slug!r}",
            name=[f"{name!r} is in use"],
        )
    config = DatabusConfig(
        tenant=tenant,
        name=name,
        description=description,
        document=normalised,
        version=1,
        created_by=actor.name,
    )
    config.full_clean()
    try:
        with transaction.atomic():
            config.save()
    except IntegrityError as exc:  # created concurrently since the check
        raise Conflict(f"Databus configuration {name!r} already exists", name=[name]) from exc
    audit.record(
        actor, "databus_config.create", config, after=audit.snapshot(config), tenant=tenant
    )
    return config


@transaction.atomic
def update_databus_config(
    config: DatabusConfig,
    *,
    document: Any = None,
    description: str | None = None,
    actor: Actor,
) -> DatabusConfig:
    """Change the document and/or the description (None: unchanged). A document that
    differs from the current one (once normalised) moves ``version`` up by one; an
    unchanged one saves and audits nothing. Same refusals as ``create_databus_config``."""
    config = DatabusConfig.objects.select_for_update().select_related("tenant").get(pk=config.pk)
    before = audit.snapshot(config) or {}
    if document is not None:
        normalised = checked_document(config.tenant, document)
        if normalised != config.document:
            config.document = normalised
            config.version += 1
    if description is not None:
        config.description = description
    config.full_clean()
    if config.document == before["document"] and config.description == before["description"]:
        return config  # nothing changed: nothing to save or audit
    config.save()
    audit.record(
        actor,
        "databus_config.update",
        config,
        before=before,
        after=audit.snapshot(config),
        tenant=config.tenant,
    )
    return config


@transaction.atomic
def delete_databus_config(config: DatabusConfig, *, actor: Actor) -> DatabusConfig:
    """Delete the configuration (its agents keep running the version they have, and
    their watch answers 404). Returns the deleted row (unsaved)."""
    config = DatabusConfig.objects.select_for_update().select_related("tenant").get(pk=config.pk)
    audit.record(
        actor, "databus_config.delete", config, before=audit.snapshot(config), tenant=config.tenant
    )
    config.delete()
    return config


def checked_document(tenant: Tenant, document: Any) -> dict[str, Any]:
    """``document`` normalised (``parse_config(document).to_json()``) if the schema and
    the tenant accept it; ``InvalidRequest`` naming the field under ``document``."""
    try:
        parsed = parse_config(document)
    except ConfigError as exc:
        raise _document_error({exc.field: [exc.message]}) from None
    problems = _tenant_problems(tenant, list(parsed.streams.values()))
    if problems:
        raise _document_error(problems)
    return parsed.to_json()


def _document_error(problems: dict[str, list[str]]) -> InvalidRequest:
    field, messages = next(iter(problems.items()))
    return InvalidRequest(f"document: {field}: {messages[0]}", document=problems)


def _tenant_problems(tenant: Tenant, streams: list[StreamConfig]) -> dict[str, list[str]]:
    """Per field (``streams.<name>.topic`` / ``.lane``), why the tenant refuses it."""
    topics = {
        t.full_name: t
        for t in live_trunk_topics(tenant).filter(full_name__in={s.topic for s in streams})
    }
    lanes = {
        lane.name: lane
        for lane in Lane.objects.filter(
            tenant=tenant, name__in={s.lane for s in streams if s.lane}
        ).prefetch_related("topics")
    }
    problems: dict[str, list[str]] = {}
    for stream in sorted(streams, key=lambda s: s.name):
        where = f"streams.{stream.name}"
        topic = topics.get(stream.topic)
        if topic is None:
            problems[f"{where}.topic"] = [f"no topic {stream.topic!r} in tenant {tenant.slug!r}"]
            continue
        if stream.lane is None:
            continue
        lane = lanes.get(stream.lane)
        if lane is None:
            problems[f"{where}.lane"] = [f"no lane {stream.lane!r} in tenant {tenant.slug!r}"]
        elif not lane.all_topics and topic not in lane.topics.all():
            problems[f"{where}.lane"] = [f"lane {stream.lane!r} does not cover {stream.topic!r}"]
    return problems


def live_trunk_topics(tenant: Tenant) -> QuerySet[Topic]:
    return (
        Topic.objects.origins()
        .filter(tenant=tenant, trunk__isnull=True)
        .exclude(status=TopicStatus.DELETING)
    )


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not re.match(SLUG_RE, name):
        rule = str(slug_validator.message)
        raise InvalidRequest(f"name: {rule}", name=[rule])


@dataclass(frozen=True)
class ResolvedStream:
    """What an agent needs of a stream's topic: its full name, the largest record it
    takes (``max_message_bytes``) and its partition count (None: the topic is gone)."""

    topic: str
    max_record_bytes: int | None
    partitions: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "max_record_bytes": self.max_record_bytes,
            "partitions": self.partitions,
        }


def resolve_streams(config: DatabusConfig) -> dict[str, ResolvedStream]:
    """Per stream of the document, its topic as it is now (one query)."""
    streams: dict[str, Any] = (config.document or {}).get("streams", {})
    names = {settings["topic"] for settings in streams.values()}
    topics = {t.full_name: t for t in live_trunk_topics(config.tenant).filter(full_name__in=names)}
    resolved = {}
    for stream, settings in sorted(streams.items()):
        topic = topics.get(settings["topic"])
        resolved[stream] = ResolvedStream(
            topic=settings["topic"],
            max_record_bytes=topic.max_message_bytes if topic else None,
            partitions=topic.partitions if topic else None,
        )
    return resolved


def current_version(config_id: int) -> int | None:
    """The configuration's version now (None: deleted), read afresh."""
    return DatabusConfig.objects.filter(pk=config_id).values_list("version", flat=True).first()


# -- agents ----------------------------------------------------------------------------------
def record_agent_heartbeat(
    tenant: Tenant,
    *,
    agent_id: uuid.UUID | str,
    config_name: str,
    version: int,
    hostname: str,
    pid: int,
    started_at: datetime,
    stats: Any,
    principal: str,
    now: datetime | None = None,
) -> int | None:
    """Note the agent's report (one upsert on ``(tenant, agent_id)``: concurrent
    heartbeats of one agent never conflict) and return the current version of the
    configuration it names in ``tenant`` (None: no such configuration). ``stats`` is
    checked (``check_stats``: ``InvalidRequest`` naming the field)."""
    agent_uuid = uuid.UUID(str(agent_id))
    reported_by = (
        DatabusAgent.objects.filter(tenant=tenant, agent_id=agent_uuid)
        .values_list("principal", flat=True)
        .first()
    )
    if reported_by is not None and reported_by != principal:
        # An agent's row belongs to the identity that first reported it: another
        # member or service account of the tenant cannot overwrite its figures.
        raise PermissionDenied(f"agent {agent_uuid} reports as another identity")
    agent = DatabusAgent(
        tenant=tenant,
        agent_id=agent_uuid,
        config_name=config_name,
        version=version,
        hostname=hostname,
        pid=pid,
        started_at=started_at,
        stats=check_stats(stats),
        principal=principal,
        last_seen=now or timezone.now(),
    )
    DatabusAgent.objects.bulk_create(
        [agent],
        update_conflicts=True,
        unique_fields=["tenant", "agent_id"],
        update_fields=[
            "config_name",
            "version",
            "hostname",
            "pid",
            "started_at",
            "stats",
            "principal",
            "last_seen",
            "updated_at",
        ],
    )
    return (
        DatabusConfig.objects.filter(tenant=tenant, name=config_name)
        .values_list("version", flat=True)
        .first()
    )


def check_stats(stats: Any) -> dict[str, dict[str, int | float]]:
    """``stats`` if it maps at most ``MAX_STATS_STREAMS`` stream names to exactly the
    counters of ``STAT_FIELDS`` (non-negative, of their type; an integer is taken as a
    float) within ``MAX_STATS_BYTES``; ``InvalidRequest`` naming the field otherwise."""
    if not isinstance(stats, dict):
        raise _stats_error("stats", "must be an object of stream name to counters")
    if len(stats) > MAX_STATS_STREAMS:
        raise _stats_error("stats", f"at most {MAX_STATS_STREAMS} streams")
    checked = {str(name): _checked_counters(name, counters) for name, counters in stats.items()}
    if len(json.dumps(checked, separators=(",", ":"))) > MAX_STATS_BYTES:
        raise _stats_error("stats", f"at most {MAX_STATS_BYTES} bytes")
    return checked


def _checked_counters(name: object, counters: Any) -> dict[str, int | float]:
    if not isinstance(name, str) or not STREAM_NAME_RE.match(name):
        raise _stats_error(f"stats.{name}", "not a stream name")
    where = f"stats.{name}"
    if not isinstance(counters, dict):
        raise _stats_error(where, "must be an object of counters")
    missing = sorted(set(STAT_FIELDS) - set(counters))
    unknown = sorted(set(counters) - set(STAT_FIELDS))
    if unknown or missing:
        field = (unknown or missing)[0]
        raise _stats_error(f"{where}.{field}", "unknown counter" if unknown else "required")
    return {
        key: _counter(f"{where}.{key}", kind, counters[key]) for key, kind in STAT_FIELDS.items()
    }


def _counter(where: str, kind: type, value: Any) -> int | float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise _stats_error(where, "must be an integer")
    if not number or not 0 <= value <= MAX_COUNTER or value != value:
        raise _stats_error(where, f"must be a number from 0 to {MAX_COUNTER}")
    return float(value) if kind is float else int(value)


def _stats_error(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {message}", **{field: [message]})


def with_latest_version(agents: QuerySet[DatabusAgent]) -> QuerySet[DatabusAgent]:
    """``agents`` annotated with ``latest_version``: the current version of the
    configuration each names in its tenant (None: no such configuration)."""
    latest = DatabusConfig.objects.filter(
        tenant_id=OuterRef("tenant_id"), name=OuterRef("config_name")
    ).values("version")[:1]
    return agents.annotate(latest_version=Subquery(latest))


def is_live(agent: DatabusAgent, now: datetime) -> bool:
    """Whether the agent's last heartbeat is within ``LIVE_WITHIN`` of ``now``."""
    return now - agent.last_seen <= LIVE_WITHIN


def forget_silent_agents(now: datetime) -> int:
    """Delete the agents without a heartbeat for ``FORGET_AFTER``; returns how many."""
    deleted, _ = DatabusAgent.objects.filter(Q(last_seen__lt=now - FORGET_AFTER)).delete()
    return deleted
