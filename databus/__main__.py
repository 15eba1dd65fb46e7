"""``meridian-databus``: run the agent.

    meridian-databus --config NAME --api URL --bootstrap HOST:PORT \\
        --token-url URL --client-id ID --client-secret-file FILE [--data-dir DIR]
    meridian-databus --config-file streams.json --bootstrap HOST:PORT [...]

With ``--config`` the agent follows that Databus configuration of its service account's
tenant on the control plane (``databus.watch``); with ``--config-file`` it runs a local
document (the same schema, ``databus.config``), for a machine without a control plane.
Every option has an environment variable (``MERIDIAN_DATABUS_*``, and the CLI's
``MERIDIAN_BOOTSTRAP``, ``MERIDIAN_API_URL``, ``MERIDIAN_TOKEN_URL``,
``MERIDIAN_CLIENT_ID``, ``MERIDIAN_CLIENT_SECRET``, ``MERIDIAN_TOKEN``,
``MERIDIAN_TLS_CA``).

Applications write to ``--http`` (default 127.0.0.1:8470), ``--grpc`` (127.0.0.1:8471)
and the unix socket ``--socket`` (default ``<data dir>/databus.sock``), presenting the
ingest token kept in ``--ingest-token-file`` (default ``<data dir>/ingest-token``; made,
private, at first start) or given in ``MERIDIAN_DATABUS_INGEST_TOKEN``. SIGTERM or
SIGINT stops taking writes, drains for up to ``--drain-timeout`` seconds and exits;
what is left stays spooled for the next start. Under ``./dev run`` the agent also stops
when its supervisor dies (``dataplane.lifeline``).
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import sys
import threading
from pathlib import Path

from databus.agent import Agent, DataDirInUse
from databus.config import ConfigError
from databus.grpc_ingest import create_server
from databus.http_ingest import IngestServer
from databus.metrics import REGISTRY, AgentCollector
from databus.upstream import BrokerUpstream
from databus.watch import ConfigWatcher, ControlPlane, FileWatcher, Heartbeat
from dataplane import lifeline
from dataplane.client.auth import ClientCredentials, StaticToken, TokenSource
from dataplane.files import create_file

log = logging.getLogger("databus")
TOKEN_FILE = "ingest-token"


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="meridian-databus", description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", default=_env("MERIDIAN_DATABUS_DATA_DIR", "databus-data"))
    p.add_argument("--bootstrap", default=_env("MERIDIAN_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument(
        "--config", default=_env("MERIDIAN_DATABUS_CONFIG"), help="config name on the control plane"
    )
    p.add_argument("--config-file", default=_env("MERIDIAN_DATABUS_CONFIG_FILE"))
    p.add_argument("--api", default=_env("MERIDIAN_API_URL", "http://127.0.0.1:8000"))
    p.add_argument("--token", default=_env("MERIDIAN_TOKEN"))
    p.add_argument("--token-url", default=_env("MERIDIAN_TOKEN_URL"))
    p.add_argument("--client-id", default=_env("MERIDIAN_CLIENT_ID"))
    p.add_argument("--client-secret-file", default=_env("MERIDIAN_CLIENT_SECRET_FILE"))
    p.add_argument("--tls-ca", default=_env("MERIDIAN_TLS_CA"))
    p.add_argument("--http", default=_env("MERIDIAN_DATABUS_HTTP", "127.0.0.1:8470"))
    p.add_argument("--grpc", default=_env("MERIDIAN_DATABUS_GRPC", "127.0.0.1:8471"))
    p.add_argument("--socket", default=_env("MERIDIAN_DATABUS_SOCKET"))
    p.add_argument("--ingest-token-file", default=_env("MERIDIAN_DATABUS_INGEST_TOKEN_FILE"))
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=float(_env("MERIDIAN_DATABUS_DRAIN_TIMEOUT_S", "5") or 5),
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=float(_env("MERIDIAN_DATABUS_HEARTBEAT_S", "10") or 10),
    )
    p.add_argument("--log-level", default=_env("MERIDIAN_LOG_LEVEL", "INFO"))
    args = p.parse_args(argv)
    if bool(args.config) == bool(args.config_file):
        p.error("give --config NAME (from the control plane) or --config-file FILE")
    return args


def _credentials(args: argparse.Namespace) -> TokenSource | None:
    if args.token:
        return StaticToken(args.token)
    if not (args.token_url or args.client_id):
        return None
    secret = os.environ.get("MERIDIAN_CLIENT_SECRET")
    if args.client_secret_file:
        secret = Path(args.client_secret_file).read_text().strip()
    if not (args.token_url and args.client_id and secret):
        raise SystemExit("--token-url needs --client-id and a secret (--client-secret-file)")
    return ClientCredentials(args.token_url, args.client_id, secret)


MIN_TOKEN_CHARS = 16


def _ingest_token(path: Path) -> str:
    """The token applications present; refuses to start with a short one (an empty file
    would otherwise let anyone in)."""
    token = os.environ.get("MERIDIAN_DATABUS_INGEST_TOKEN") or _token_file(path)
    if len(token) < MIN_TOKEN_CHARS:
        raise SystemExit(f"the ingest token must have at least {MIN_TOKEN_CHARS} characters")
    return token


def _token_file(path: Path) -> str:
    create_file(path, secrets.token_urlsafe(32).encode(), private=True)
    return path.read_text().strip()


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    lifeline.watch()
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    credentials = _credentials(args)
    upstream = BrokerUpstream(args.bootstrap, credentials=credentials, tls=args.tls_ca)
    try:
        agent = Agent(data_dir, upstream, config_name=args.config or Path(args.config_file).name)
    except DataDirInUse as err:
        raise SystemExit(str(err)) from None
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    workers: list[ConfigWatcher | Heartbeat | FileWatcher] = []
    if args.config_file:
        watcher = FileWatcher(agent, Path(args.config_file))
        try:
            watcher.load()
        except (OSError, ValueError, ConfigError) as err:
            raise SystemExit(f"{args.config_file}: {err}") from None
        workers = [watcher]
    else:
        control_plane = ControlPlane(args.api, credentials)
        workers = [
            ConfigWatcher(agent, control_plane, args.config),
            Heartbeat(agent, control_plane, args.heartbeat_interval),
        ]
    token = _ingest_token(Path(args.ingest_token_file or data_dir / TOKEN_FILE))
    REGISTRY.register(AgentCollector(agent.stats, lambda: agent.version))
    http = IngestServer(_host_port(args.http), agent, token, REGISTRY)
    http.start()
    socket_path = args.socket or str(data_dir / "databus.sock")
    grpc_server, ports = create_server(agent, token, [args.grpc, f"unix:{socket_path}"])
    for worker in workers:
        worker.start()
    log.info(
        "databus agent %s: http %s:%s, grpc %s (port %s), socket %s, data %s",
        agent.agent_id,
        http.server_address[0],
        http.server_address[1],
        args.grpc,
        ports[0],
        socket_path,
        data_dir,
    )
    host, port = str(http.server_address[0]), int(http.server_address[1])
    print(
        f"databus ready: http={host}:{port} grpc_port={ports[0]} socket={socket_path}", flush=True
    )
    stopping.wait()
    log.info("stopping: draining for up to %.1f s", args.drain_timeout)
    for worker in workers:
        worker.stop()
    http.shutdown()
    grpc_server.stop(grace=1).wait()
    agent.close(args.drain_timeout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
