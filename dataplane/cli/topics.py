"""``meridian topics``: list, create, alter, describe and delete topics (the SDK's
``Admin``)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer

from dataplane._gen.meridian.v1 import common_pb2
from dataplane.cli.base import invalid, parse_pairs, settings, stdout, table
from dataplane.client import Admin
from dataplane.client.admin import TopicDescription
from dataplane.errors import ErrorCode, MeridianError

_FIELDS = common_pb2.PartitionConfig.DESCRIPTOR.fields_by_name
_STRING = 9  # FieldDescriptor.TYPE_STRING
_BOOL = 8  # FieldDescriptor.TYPE_BOOL
_BOOLS = {"true": True, "false": False, "1": True, "0": False, "on": True, "off": False}

ConfigOption = Annotated[
    list[str] | None,
    typer.Option("--config", "-c", help="A setting KEY=VALUE, e.g. retention_ms=86400000."),
]
RemoteStorageOption = Annotated[
    bool | None,
    typer.Option(
        "--remote-storage/--no-remote-storage",
        help="Tiered storage: upload sealed segments to the cluster's object store "
        "(once on, brokers refuse turning it off).",
        show_default=False,
    ),
]
LocalRetentionMsOption = Annotated[
    int | None,
    typer.Option(
        help="With tiered storage: how long records stay on the brokers' disks "
        "(-2: the retention, -1: unlimited).",
        show_default=False,
    ),
]
LocalRetentionBytesOption = Annotated[
    int | None,
    typer.Option(
        help="With tiered storage: bytes per partition kept on the brokers' disks "
        "(-2: the retention, -1: unlimited).",
        show_default=False,
    ),
]
SegmentBytesOption = Annotated[
    int | None,
    typer.Option(
        "--segment-bytes",
        help="Seal a partition's active segment at this size (max_segment_bytes); a tiered "
        "topic uploads a segment once sealed.",
        show_default=False,
    ),
]
SegmentMsOption = Annotated[
    int | None,
    typer.Option(
        "--segment-ms",
        help="Seal a partition's active segment at this age, in ms (segment_ms).",
        show_default=False,
    ),
]


def list_topics(
    ctx: typer.Context,
    internal: Annotated[
        bool, typer.Option("--internal", help="Include internal topics (__...).")
    ] = False,
) -> None:
    """List the topics of the cluster with their partition counts."""
    with Admin(settings(ctx).bootstrap, client_id="meridian-cli", **settings(ctx).connect) as admin:
        topics = admin.list_topics(internal=internal)
    stdout().print(table(None, ["topic", "partitions"], sorted(topics.items())))


def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name, <tenant>.<topic>.")],
    partitions: Annotated[int, typer.Option(help="Number of partitions.")] = 1,
    config: ConfigOption = None,
    remote_storage: RemoteStorageOption = None,
    local_retention_ms: LocalRetentionMsOption = None,
    local_retention_bytes: LocalRetentionBytesOption = None,
    segment_bytes: SegmentBytesOption = None,
    segment_ms: SegmentMsOption = None,
) -> None:
    """Create topic NAME with --partitions partitions and optional --config settings. A
    tiered topic (--remote-storage) gets a new topic_id unless --config names one."""
    settings_ = config_with(
        config,
        remote_storage=remote_storage,
        local_retention_ms=local_retention_ms,
        local_retention_bytes=local_retention_bytes,
        max_segment_bytes=segment_bytes,
        segment_ms=segment_ms,
    )
    if settings_.get("remote_storage") and not settings_.get("topic_id"):
        settings_["topic_id"] = new_topic_id()
    with Admin(settings(ctx).bootstrap, client_id="meridian-cli", **settings(ctx).connect) as admin:
        if name in admin.list_topics(internal=True):
            raise MeridianError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        placement = admin.create_topic(name, partitions, settings_)
    brokers = ", ".join(str(b) for b in sorted(set(placement.values())))
    stdout().print(f"created topic {name} with {len(placement)} partitions on broker(s) {brokers}")


def alter(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name, <tenant>.<topic>.")],
    config: ConfigOption = None,
    remote_storage: RemoteStorageOption = None,
    local_retention_ms: LocalRetentionMsOption = None,
    local_retention_bytes: LocalRetentionBytesOption = None,
    segment_bytes: SegmentBytesOption = None,
    segment_ms: SegmentMsOption = None,
) -> None:
    """Change settings of topic NAME on every partition (only the ones given). Turning
    tiered storage on keeps the topic's topic_id, or gives it a new one."""
    settings_ = config_with(
        config,
        remote_storage=remote_storage,
        local_retention_ms=local_retention_ms,
        local_retention_bytes=local_retention_bytes,
        max_segment_bytes=segment_bytes,
        segment_ms=segment_ms,
    )
    if not settings_:
        raise invalid(
            "nothing to change: give --config or a setting flag", ErrorCode.INVALID_CONFIG
        )
    with Admin(settings(ctx).bootstrap, client_id="meridian-cli", **settings(ctx).connect) as admin:
        if settings_.get("remote_storage") and not settings_.get("topic_id"):
            settings_["topic_id"] = _topic_id_of(admin.describe_topic(name)) or new_topic_id()
        admin.alter_topic_config(name, settings_)
    changed = ", ".join(f"{k}={v}" for k, v in sorted(settings_.items()))
    stdout().print(f"altered topic {name}: {changed}")


def new_topic_id() -> str:
    """An id for a topic made outside the control plane (whose ids are its topics' keys):
    it names the topic's objects in the object store, so it must never repeat."""
    return uuid.uuid4().hex


def _topic_id_of(topic: TopicDescription) -> str:
    ids = (str(p.config.get("topic_id") or "") for p in topic.partitions)
    return next((topic_id for topic_id in ids if topic_id), "")


def config_with(pairs: list[str] | None, **flags: Any) -> dict[str, Any]:
    """The typed ``--config`` pairs with the setting flags given (``PartitionConfig``
    field names; a flag given wins, None is not given)."""
    typed = typed_config(parse_pairs(pairs or [], "config"))
    return typed | {key: value for key, value in flags.items() if value is not None}


def typed_config(values: dict[str, str]) -> dict[str, Any]:
    """Config values as their ``PartitionConfig`` field types (unknown keys stay strings,
    for the SDK to refuse with the list of known ones)."""
    typed: dict[str, Any] = {}
    for key, value in values.items():
        field = _FIELDS.get(key)
        if field is None or field.type == _STRING:
            typed[key] = value
            continue
        if field.type == _BOOL:
            if value.lower() not in _BOOLS:
                raise invalid(f"{key} takes true or false, not {value!r}", ErrorCode.INVALID_CONFIG)
            typed[key] = _BOOLS[value.lower()]
            continue
        try:
            typed[key] = int(value)
        except ValueError:
            raise invalid(
                f"{key} takes an integer, not {value!r}", ErrorCode.INVALID_CONFIG
            ) from None
    return typed


def describe(ctx: typer.Context, name: Annotated[str, typer.Argument(help="Topic name.")]) -> None:
    """Show the partitions of topic NAME (leader, offsets, size) and its configuration."""
    with Admin(settings(ctx).bootstrap, client_id="meridian-cli", **settings(ctx).connect) as admin:
        topic = admin.describe_topic(name)
    out = stdout()
    remote = f", {topic.remote_bytes:,} bytes in the object store" if topic.remote_bytes else ""
    out.print(
        f"topic {topic.name}: {len(topic.partitions)} partitions, "
        f"{topic.records:,} records, {topic.size_bytes:,} bytes{remote}"
    )
    rows = [
        [
            p.partition,
            p.leader,
            p.log_start_offset,
            p.high_watermark,
            p.log_end_offset,
            f"{p.size_bytes:,}",
            p.segments,
            *((f"{p.remote_bytes:,}", p.remote_segments) if topic.remote_bytes else ()),
            "offline" if p.offline else "online",
        ]
        for p in topic.partitions
    ]
    headers = ["partition", "leader", "start", "high watermark", "end", "bytes", "segments"]
    if topic.remote_bytes:
        headers += ["remote bytes", "remote segments"]
    out.print(table(None, [*headers, "state"], rows))
    config = next((p.config for p in topic.partitions if p.config), {})
    if config:
        out.print(table("config", ["key", "value"], sorted(config.items())))


def delete(ctx: typer.Context, name: Annotated[str, typer.Argument(help="Topic name.")]) -> None:
    """Delete topic NAME and all its records."""
    with Admin(settings(ctx).bootstrap, client_id="meridian-cli", **settings(ctx).connect) as admin:
        if name not in admin.list_topics(internal=True):
            raise MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        admin.delete_topic(name)
    stdout().print(f"deleted topic {name}")
