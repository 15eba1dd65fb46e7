"""The broker's configuration: a TOML file and/or command-line flags, checked up front.

A TOML file uses the field names of ``BrokerConfig`` (``id`` for ``broker_id``), with
``[peers]`` mapping broker ids to ``host:port`` and ``[log]`` holding the default
``LogConfig`` of new partitions (its field names; ``durability`` is ``always``,
``interval`` or ``never``; ``timestamp_type`` is ``CreateTime`` or ``LogAppendTime``)::

    id = 1
    region = "eu-west"
    listen = "0.0.0.0:9092"
    kafka_listen = "0.0.0.0:9093"       # Kafka's wire protocol beside gRPC; "" turns it off
    kafka_max_connections = 4096        # Kafka connections kept in all, and from one address
    kafka_max_connections_per_ip = 1024
    kafka_auth_timeout_ms = 30000       # a Kafka connection not authenticated by then is closed
    advertised_host = "broker-1.internal"
    data_dir = "/var/lib/meridian/1"
    metrics_listen = "0.0.0.0:9100"     # "" disables the metrics endpoint
    max_open_files = 8192               # descriptors for segment files; 0: the default
    replica_lag_time_max_ms = 10000     # a follower behind this long leaves the ISR
    jwks_url = "https://keycloak/realms/meridian/protocol/openid-connect/certs"
    token_issuer = "https://keycloak/realms/meridian"   # auth is off without jwks_url
    token_url = "https://keycloak/realms/meridian/protocol/openid-connect/token"
    client_id = "meridian-broker"       # this broker's credentials for calls to peers
    client_secret_file = "/etc/meridian/broker-secret"
    tls_cert_file = "/etc/meridian/tls.crt"   # with tls_key_file: TLS on the listener
    tls_key_file = "/etc/meridian/tls.key"
    tls_ca_file = "/etc/meridian/ca.crt"      # what peers' certificates are checked with
    remote_store_uri = "s3://meridian-tier/eu-west"   # tiered storage; "" turns it off
    remote_store_options_file = "/etc/meridian/store.json"  # fsspec options (credentials)
    [peers]
    2 = "broker-2.internal:9092"
    [log]
    durability = "interval"
    retention_ms = 604800000

Flags override the file. Anything invalid raises ``ConfigError`` naming the field.
Membership (``peers``) is static until the control plane drives it.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataplane.broker.topics import TIMESTAMP_TYPES
from dataplane.storage.config import LogConfig, MiB
from dataplane.storage.errors import InvalidConfigError

MAX_BROKER_ID = 2**20 - 1  # producer ids carry the broker id in their high bits


class ConfigError(ValueError):
    """The broker configuration is invalid; the message names the field."""


@dataclass(frozen=True)
class BrokerConfig:
    """Everything one broker process needs; see the module docstring for the file form."""

    broker_id: int
    data_dir: Path
    region: str = "local"
    cluster_id: str = "meridian"
    listen: str = "127.0.0.1:0"  # port 0: the OS picks one (see BrokerApp.port)
    advertised_host: str = ""  # default: the listen host (127.0.0.1 for a wildcard)
    # Kafka's wire protocol (dataplane/broker/kafka), advertised on ``host`` at its bound
    # port; "" serves gRPC alone.
    kafka_listen: str = ""
    peers: Mapping[int, str] = field(default_factory=dict)  # other brokers: id -> host:port
    control_plane_url: str = ""  # stored; the control plane does not drive brokers yet
    metrics_listen: str = "127.0.0.1:0"  # "" disables the Prometheus endpoint
    offsets_topic_partitions: int = 16
    # Transactions and half messages (docs/transactions.md): the partitions of
    # __transaction_state (placed as __consumer_offsets' are), the longest transaction
    # timeout a producer may ask for, and the check-back defaults of half messages.
    txn_state_partitions: int = 16
    transaction_max_timeout_ms: int = 900_000
    half_check_interval_ms: int = 60_000
    half_max_checks: int = 15
    half_default_outcome: str = "rollback"  # or "commit": after half_max_checks unanswered
    # the longest a half message stays undecided, whatever its producer asked: then its
    # default outcome applies (it holds back every reader of its partition until then)
    half_max_lifetime_ms: int = 900_000
    # bounds on what one tenant keeps in a coordinator's memory: the partitions of one
    # transaction, and the undecided half messages a coordinator holds per tenant
    txn_max_partitions: int = 10_000
    half_max_open_per_tenant: int = 100_000
    log: LogConfig = field(default_factory=LogConfig)
    max_request_bytes: int = 64 * MiB  # records of one produce request, all partitions
    fetch_max_bytes: int = 64 * MiB  # cap of a fetch response's max_bytes
    fetch_max_wait_ms: int = 30_000  # cap of a fetch's max_wait_ms
    produce_max_in_flight: int = 128  # pipelined requests per produce stream
    io_threads: int = 16  # threads running blocking log calls
    peer_poll_interval_ms: int = 500
    peer_expiry_ms: int = 5_000  # an unreachable peer's partitions are dropped after this
    producer_snapshot_interval_ms: int = 60_000
    group_lag_interval_ms: int = 10_000  # how often group lag is asked of other leaders
    max_open_files: int = 0  # descriptors of open segment files; 0: LogManager's default
    replica_lag_time_max_ms: int = 10_000  # a follower not caught up this long leaves the ISR
    # Authentication (dataplane/broker/auth): on when jwks_url names the issuer's JWKS.
    jwks_url: str = ""
    token_issuer: str = ""  # required with jwks_url: the tokens' ``iss``
    token_audience: str = "meridian"
    internal_role: str = "meridian-internal"  # realm role of the cluster's own callers
    # This broker's own client credentials (calls to peers), when peers require tokens.
    token_url: str = ""
    client_id: str = ""
    client_secret_file: str = ""
    # TLS: the listener serves with cert and key; peers are reached over TLS, trusting
    # tls_ca_file (the system's roots when empty).
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_ca_file: str = ""
    # SASL/PLAIN on the Kafka listener: a service account's client id and secret are
    # exchanged for a token at this token endpoint (default: token_url); without either,
    # the Kafka listener offers OAUTHBEARER alone.
    sasl_plain_token_url: str = ""
    # Bounds of the Kafka listener against clients that hold connections: how many it
    # keeps in all and from one address, and how long one may take to authenticate.
    kafka_max_connections: int = 4096
    kafka_max_connections_per_ip: int = 1024
    kafka_auth_timeout_ms: int = 30_000
    quota_max_hold_ms: int = 10_000  # longest a throttled response is held (quotas.py)
    # Tiered storage (dataplane/tiered): the cluster's object store, as an fsspec URI (a
    # local folder path, file://, s3://, ...); "" turns tiering off. The options file is a
    # private JSON object of the filesystem's options (endpoint, credentials), never a flag.
    remote_store_uri: str = ""
    remote_store_options_file: str = ""
    remote_cache_bytes: int = 256 * MiB  # the local cache of remote chunks
    tier_interval_ms: int = 1_000  # how often uploads, local and remote retention run
    # An object in a partition's folder that no manifest lists is deleted once this old
    # (an upload whose commit never came, or a segment whose deletion was cut short).
    orphan_grace_ms: int = 300_000

    def __post_init__(self) -> None:
        _check(0 <= self.broker_id <= MAX_BROKER_ID, "id", f"must be in [0, {MAX_BROKER_ID}]")
        parse_address(self.listen, "listen")
        if self.kafka_listen:
            parse_address(self.kafka_listen, "kafka_listen")
        if self.metrics_listen:
            parse_address(self.metrics_listen, "metrics_listen")
        for peer_id, address in self.peers.items():
            _check(isinstance(peer_id, int) and peer_id >= 0, "peers", f"bad id {peer_id!r}")
            _check(peer_id != self.broker_id, "peers", f"{peer_id} is this broker's own id")
            parse_address(address, f"peers.{peer_id}", port_zero=False)
        _check(self.offsets_topic_partitions >= 1, "offsets_topic_partitions", "must be >= 1")
        _check(
            self.half_default_outcome in ("commit", "rollback"),
            "half_default_outcome",
            "must be commit or rollback",
        )
        for name in ("max_request_bytes", "fetch_max_bytes", "produce_max_in_flight"):
            _check(getattr(self, name) >= 1, name, "must be >= 1")
        for name in (
            "io_threads",
            "peer_poll_interval_ms",
            "peer_expiry_ms",
            "replica_lag_time_max_ms",
            "group_lag_interval_ms",
            "tier_interval_ms",
            "orphan_grace_ms",
            "kafka_max_connections",
            "kafka_max_connections_per_ip",
            "kafka_auth_timeout_ms",
            "txn_state_partitions",
            "transaction_max_timeout_ms",
            "half_check_interval_ms",
            "half_max_checks",
            "half_max_lifetime_ms",
            "txn_max_partitions",
            "half_max_open_per_tenant",
        ):
            _check(getattr(self, name) >= 1, name, "must be >= 1")
        _check(self.fetch_max_wait_ms >= 0, "fetch_max_wait_ms", "must be >= 0")
        _check(self.max_open_files >= 0, "max_open_files", "must be >= 0")
        _check(self.quota_max_hold_ms >= 0, "quota_max_hold_ms", "must be >= 0")
        _check(self.remote_cache_bytes >= 0, "remote_cache_bytes", "must be >= 0")
        _check(
            bool(self.remote_store_uri) or not self.remote_store_options_file,
            "remote_store_options_file",
            "needs remote_store_uri",
        )
        _check(self.producer_snapshot_interval_ms >= 1, "producer_snapshot_interval_ms", ">= 1")
        self._check_security()

    def _check_security(self) -> None:
        if self.jwks_url:
            scheme = self.jwks_url.partition("://")[0].lower()
            _check(scheme in ("http", "https"), "jwks_url", "must be an http or https URL")
            _check(bool(self.token_issuer), "token_issuer", "required with jwks_url")
            _check(bool(self.token_audience), "token_audience", "required with jwks_url")
        own = (self.token_url, self.client_id, self.client_secret_file)
        _check(all(own) or not any(own), "token_url", "needs client_id and client_secret_file")
        tls = (self.tls_cert_file, self.tls_key_file)
        _check(all(tls) or not any(tls), "tls_cert_file", "needs tls_key_file (and back)")

    @property
    def auth_enabled(self) -> bool:
        return bool(self.jwks_url)

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_cert_file)

    @property
    def listen_host(self) -> str:
        return parse_address(self.listen, "listen")[0]

    @property
    def listen_port(self) -> int:
        return parse_address(self.listen, "listen")[1]

    @property
    def plain_token_url(self) -> str:
        """Where SASL/PLAIN credentials are exchanged for a token ("": PLAIN is off)."""
        return self.sasl_plain_token_url or self.token_url

    @property
    def host(self) -> str:
        """The host other brokers and clients reach this broker at."""
        if self.advertised_host:
            return self.advertised_host
        host = self.listen_host
        return "127.0.0.1" if host in ("0.0.0.0", "::", "[::]", "") else host

    @property
    def all_broker_ids(self) -> list[int]:
        return sorted({self.broker_id, *self.peers})


def parse_address(address: str, name: str, *, port_zero: bool = True) -> tuple[str, int]:
    """``host:port`` → (host, port); raises ``ConfigError`` naming ``name``."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{name}: {address!r} is not host:port")
    if int(port) == 0 and not port_zero:
        raise ConfigError(f"{name}: {address!r} needs a real port")
    return host, int(port)


def _check(ok: bool, name: str, why: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: {why}")


def log_config_from(values: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
    """A ``LogConfig`` from TOML-style values (``durability`` and ``timestamp_type`` as
    strings) over ``base``; raises ``ConfigError``."""
    fields = {f.name for f in dataclasses.fields(LogConfig)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ConfigError(f"log: unknown keys {unknown}")
    changes = dict(values)
    if "timestamp_type" in changes:
        name = changes["timestamp_type"]
        if name not in TIMESTAMP_TYPES:
            raise ConfigError(f"log.timestamp_type: {name!r} is not one of {list(TIMESTAMP_TYPES)}")
        changes["timestamp_type"] = TIMESTAMP_TYPES[name]
    try:
        config = LogConfig.from_dict({**(base or LogConfig()).to_dict(), **changes})
    except (InvalidConfigError, TypeError) as exc:
        raise ConfigError(f"log: {exc}") from exc
    return config


def load_config(path: Path | str | None = None, **overrides: Any) -> BrokerConfig:
    """Read ``path`` (TOML) if given, apply ``overrides`` (flag values; None = unset).

    Raises ``ConfigError`` for an unreadable file, unknown keys, missing ``id`` or
    ``data_dir``, or any out-of-range value.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc
    if "id" in raw:
        raw["broker_id"] = raw.pop("id")
    raw.update({k: v for k, v in overrides.items() if v is not None})
    return _build(raw)


def _build(raw: dict[str, Any]) -> BrokerConfig:
    known = {f.name for f in dataclasses.fields(BrokerConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown config keys: {unknown}")
    for required, flag in (("broker_id", "id"), ("data_dir", "data_dir")):
        if required not in raw:
            raise ConfigError(
                f"{flag}: required (in the config file or as --{flag.replace('_', '-')})"
            )
    values = dict(raw)
    values["data_dir"] = Path(values["data_dir"])
    values["peers"] = _peers(values.get("peers", {}))
    log_values = values.get("log", {})
    if not isinstance(log_values, LogConfig):
        if not isinstance(log_values, Mapping):
            raise ConfigError("log: must be a table")
        values["log"] = log_config_from(log_values)
    for name in known - {"data_dir", "peers", "log"}:
        if name in values:
            values[name] = _typed(name, values[name])
    return BrokerConfig(**values)


def _peers(raw: Any) -> dict[int, str]:
    if not isinstance(raw, Mapping):
        raise ConfigError("peers: must map broker ids to host:port")
    peers: dict[int, str] = {}
    for key, address in raw.items():
        try:
            peers[int(key)] = str(address)
        except ValueError:
            raise ConfigError(f"peers: {key!r} is not a broker id") from None
    return peers


def _typed(name: str, value: Any) -> Any:
    declared = {f.name: f.type for f in dataclasses.fields(BrokerConfig)}[name]
    if declared == "int":
        if isinstance(value, bool):
            raise ConfigError(f"{name}: {value!r} is not an integer")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: {value!r} is not an integer") from None
    if not isinstance(value, str):
        raise ConfigError(f"{name}: {value!r} is not a string")
    return value
