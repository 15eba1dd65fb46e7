"""The broker process: ``meridian-broker`` / ``python -m dataplane.broker``.

    meridian-broker --config broker.toml
    meridian-broker --id 1 --data-dir data/1 --listen 127.0.0.1:0 --peer 2=127.0.0.1:9093 \\
        --ready-file /tmp/b1.json

Flags override the config file (see ``config.py``). Once serving, ``--ready-file`` is
written atomically as JSON ``{"broker_id", "port", "metrics_port", "pid"}`` (a port 0
listener's real port is there). SIGTERM or SIGINT stops it cleanly: no new calls,
in-flight ones finish, every log is closed; the exit code is then 0. A bad configuration
exits with 2, a failure to start (port or data directory in use) with 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

from dataplane import lifeline
from dataplane.broker.app import BrokerApp
from dataplane.broker.config import BrokerConfig, ConfigError, load_config
from dataplane.files import replace_file

log = logging.getLogger("dataplane.broker")
SECURITY_FLAGS = (
    "jwks_url",
    "token_issuer",
    "token_audience",
    "internal_role",
    "token_url",
    "client_id",
    "client_secret_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_ca_file",
    "sasl_plain_token_url",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="meridian-broker", description="Run a Meridian broker.")
    parser.add_argument("--config", type=Path, help="TOML config file")
    parser.add_argument("--id", type=int, dest="broker_id", help="broker id")
    parser.add_argument("--region")
    parser.add_argument("--cluster-id")
    parser.add_argument("--listen", help="host:port to serve gRPC on (port 0: any)")
    parser.add_argument(
        "--kafka-listen", help='host:port to serve Kafka\'s protocol on (port 0: any; "" off)'
    )
    parser.add_argument(
        "--kafka-auth-timeout-ms",
        type=int,
        help="a Kafka connection not authenticated by then is closed (default 30000)",
    )
    parser.add_argument(
        "--kafka-max-connections-per-ip",
        type=int,
        help="Kafka connections kept from one address (default 1024)",
    )
    parser.add_argument("--advertised-host", help="host clients and peers reach us at")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument(
        "--peer", action="append", default=[], metavar="ID=HOST:PORT", help="another broker"
    )
    parser.add_argument("--metrics-listen", help='host:port for /metrics ("" disables)')
    parser.add_argument("--control-plane-url")
    parser.add_argument(
        "--max-open-files", type=int, help="descriptors for segment files (0: the default)"
    )
    parser.add_argument(
        "--replica-lag-time-max-ms",
        type=int,
        help="a follower not caught up for this long leaves the ISR (default 10000)",
    )
    for flag, what in (
        ("--jwks-url", "the token issuer's JWKS (turns authentication on)"),
        ("--token-issuer", "the tokens' iss"),
        ("--token-audience", "the tokens' aud"),
        ("--internal-role", "realm role of the cluster's own callers"),
        ("--token-url", "where this broker gets its own token (client credentials)"),
        ("--client-id", "this broker's client id"),
        ("--client-secret-file", "file holding this broker's client secret"),
        ("--tls-cert-file", "certificate (PEM) of the TLS listener"),
        ("--tls-key-file", "private key (PEM) of the TLS listener"),
        ("--tls-ca-file", "CA (PEM) peers' certificates are checked with"),
        ("--sasl-plain-token-url", "token endpoint SASL/PLAIN credentials are exchanged at"),
        ("--remote-store-uri", "the object store of tiered storage (a folder, s3://...)"),
        ("--remote-store-options-file", "private JSON file of the store's options"),
    ):
        parser.add_argument(flag, help=what)
    parser.add_argument(
        "--tier-interval-ms", type=int, help="how often uploads and retention run (1000)"
    )
    parser.add_argument(
        "--orphan-grace-ms",
        type=int,
        help="age at which an object no manifest lists is deleted (300000)",
    )
    parser.add_argument("--ready-file", type=Path, help="written as JSON once serving")
    parser.add_argument("--log-level", default=os.environ.get("MERIDIAN_LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    peers = None
    if args.peer:
        peers = {}
        for item in args.peer:
            peer_id, sep, address = item.partition("=")
            if not sep or not peer_id.strip().isdigit():
                raise ConfigError(f"--peer {item!r}: expected ID=HOST:PORT")
            peers[int(peer_id)] = address
    return load_config(
        args.config,
        broker_id=args.broker_id,
        region=args.region,
        cluster_id=args.cluster_id,
        listen=args.listen,
        kafka_listen=args.kafka_listen,
        kafka_auth_timeout_ms=args.kafka_auth_timeout_ms,
        kafka_max_connections_per_ip=args.kafka_max_connections_per_ip,
        advertised_host=args.advertised_host,
        data_dir=args.data_dir,
        peers=peers,
        metrics_listen=args.metrics_listen,
        control_plane_url=args.control_plane_url,
        max_open_files=args.max_open_files,
        replica_lag_time_max_ms=args.replica_lag_time_max_ms,
        remote_store_uri=args.remote_store_uri,
        remote_store_options_file=args.remote_store_options_file,
        tier_interval_ms=args.tier_interval_ms,
        orphan_grace_ms=args.orphan_grace_ms,
        **{name: getattr(args, name) for name in SECURITY_FLAGS},
    )


def write_ready_file(path: Path, app: BrokerApp) -> None:
    """Whole: a reader sees either no file or the whole JSON (``replace_file``)."""
    payload = {
        "broker_id": app.config.broker_id,
        "port": app.port,
        "metrics_port": app.metrics_port,
        "kafka_port": app.kafka_port,
        "pid": os.getpid(),
    }
    replace_file(path, json.dumps(payload).encode())


async def serve(config: BrokerConfig, ready_file: Path | None) -> None:
    """Run a broker until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    app = BrokerApp(config)
    try:
        await app.start()
        if ready_file is not None:
            write_ready_file(ready_file, app)
        await stopping.wait()
        log.info("stopping broker %s", config.broker_id)
    finally:
        await app.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"meridian-broker: invalid configuration: {exc}", file=sys.stderr)
        return 2
    lifeline.watch()  # started by ./dev run: stop when it does, even if it was SIGKILLed
    try:
        asyncio.run(serve(config, args.ready_file))
    except Exception as exc:
        log.exception("broker %s failed: %s", config.broker_id, exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
