"""A worker's configuration file: the JSON document the controller writes (0600).

```json
{"link": "acme/orders-to-west", "link_id": 7, "generation": 3,
 "from_region": "east", "to_region": "west",
 "source": {"bootstrap": ["127.0.0.1:4101"], "tls_ca_file": null},
 "target": {"bootstrap": ["127.0.0.1:5101"], "tls_ca_file": null},
 "credentials": {"token_url": "...", "client_id": "...", "client_secret_file": "/path"}
                | {"token": "<jwt>"} | null,
 "topics": [{"source": "acme.orders", "target": "acme.orders", "partitions": [0, 1, 2]}],
 "start": {"position": "earliest"} | {"position": "latest"}
          | {"position": "timestamp", "timestamp_ms": 1},
 "checkpoints": {"acme.orders/0": {"source_offset": 120, "target_offset": 130}},
 "checkpoint_interval_ms": 5000,
 "batch": {"max_records": 5000, "max_bytes": 4194304, "linger_ms": 5}}
```

``checkpoints`` are keyed by ``<source topic>/<partition>``: the newest offset-map point
the control plane holds (a target offset known to hold a copy of that source offset).
The file and the client secret file must not be readable by group or others: the worker
refuses to start otherwise, as for every secret file.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataplane.client.auth import ClientCredentials, StaticToken, TokenSource

POSITIONS = ("earliest", "latest", "timestamp")


class ConfigError(ValueError):
    """The configuration file is missing, unsafe or does not follow the schema."""


@dataclass(frozen=True)
class Cluster:
    bootstrap: list[str]
    tls_ca_file: str | None = None


@dataclass(frozen=True)
class TopicMapping:
    source: str
    target: str
    partitions: list[int]


@dataclass(frozen=True)
class Checkpoint:
    source_offset: int
    target_offset: int


@dataclass(frozen=True)
class Batching:
    max_records: int = 5000
    max_bytes: int = 4 * 1024 * 1024
    linger_ms: float = 5


@dataclass(frozen=True)
class MirrorConfig:
    link: str
    link_id: int
    generation: int
    from_region: str
    to_region: str
    source: Cluster
    target: Cluster
    topics: list[TopicMapping]
    start_position: str = "earliest"
    start_timestamp_ms: int | None = None
    credentials: dict[str, Any] | None = None
    checkpoints: dict[tuple[str, int], Checkpoint] = field(default_factory=dict)
    checkpoint_interval_ms: float = 5000
    batch: Batching = field(default_factory=Batching)

    def token_source(self) -> TokenSource | None:
        """The worker's identity on both sides, from ``credentials``."""
        creds = self.credentials
        if not creds:
            return None
        if creds.get("token"):
            return StaticToken(str(creds["token"]))
        path = Path(creds["client_secret_file"])
        try:
            secret = _read_private(path).decode().strip()
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: the client secret is not UTF-8 text") from None
        return ClientCredentials(creds["token_url"], creds["client_id"], secret)


def load_config(path: str | os.PathLike[str]) -> MirrorConfig:
    """The configuration in ``path``; ``ConfigError`` when unsafe or malformed."""
    try:
        document = json.loads(_read_private(Path(path)))
        return parse_config(document)
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{path}: {type(err).__name__}: {err}") from None


def _read_private(path: Path) -> bytes:
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if stat.S_IMODE(mode) & 0o077:
                raise ConfigError(
                    f"{path} is readable by others (mode {stat.S_IMODE(mode):o}): "
                    "it holds secrets; make it 0600"
                )
            return file.read()
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror or err}") from None


def parse_config(document: dict[str, Any]) -> MirrorConfig:
    """The typed configuration of a parsed document (see the module docstring)."""
    start = document.get("start") or {"position": "earliest"}
    position = start.get("position", "earliest")
    if position not in POSITIONS:
        raise ConfigError(f"start.position must be one of {POSITIONS}, not {position!r}")
    timestamp = start.get("timestamp_ms")
    if position == "timestamp" and (not isinstance(timestamp, int) or timestamp < 0):
        raise ConfigError("start.position 'timestamp' needs start.timestamp_ms >= 0")
    topics = [
        TopicMapping(str(t["source"]), str(t["target"]), [int(p) for p in t["partitions"]])
        for t in document["topics"]
    ]
    if not topics:
        raise ConfigError("topics is empty: nothing to copy")
    creds = document.get("credentials")
    if creds:
        if not isinstance(creds, dict):
            raise ConfigError("credentials must be an object or null")
        if not creds.get("token"):
            missing = [k for k in ("token_url", "client_id", "client_secret_file")
                       if not isinstance(creds.get(k), str) or not creds[k]]  # fmt: skip
            if missing:
                raise ConfigError(
                    "credentials need a token, or token_url, client_id and client_secret_file"
                    f" (missing: {', '.join(missing)})"
                )
    return MirrorConfig(
        link=str(document["link"]),
        link_id=int(document["link_id"]),
        generation=int(document["generation"]),
        from_region=str(document["from_region"]),
        to_region=str(document["to_region"]),
        source=_cluster(document["source"]),
        target=_cluster(document["target"]),
        topics=topics,
        start_position=position,
        start_timestamp_ms=timestamp if position == "timestamp" else None,
        credentials=creds or None,
        checkpoints=_checkpoints(document.get("checkpoints") or {}),
        checkpoint_interval_ms=float(document.get("checkpoint_interval_ms", 5000)),
        batch=Batching(**(document.get("batch") or {})),
    )


def _cluster(value: dict[str, Any]) -> Cluster:
    bootstrap = value["bootstrap"]
    if isinstance(bootstrap, str):
        bootstrap = [bootstrap]
    if not bootstrap:
        raise ConfigError("a cluster needs at least one bootstrap address")
    return Cluster([str(b) for b in bootstrap], value.get("tls_ca_file"))


def _checkpoints(value: dict[str, Any]) -> dict[tuple[str, int], Checkpoint]:
    out = {}
    for key, point in value.items():
        topic, _, partition = str(key).rpartition("/")
        out[topic, int(partition)] = Checkpoint(
            int(point["source_offset"]), int(point["target_offset"])
        )
    return out
