"""``meridian-mirror``: run one mirror worker.

    python -m mirror --config FILE [--status-listen 127.0.0.1:0] [--ready-file FILE]

Reads the configuration (``mirror.config``; refused when group- or world-readable),
serves ``/status`` and ``/metrics`` on ``--status-listen``, writes the ready file
(``{"pid", "status_port", "generation"}``) once serving, and copies until SIGTERM or
SIGINT, which flush what is in flight (up to ``copier.CLOSE_TIMEOUT_S``) and exit 0
within ``STOP_TIMEOUT_S`` (and ``EXIT_GRACE_S`` for the rest of the exit, whatever still
runs). Under a supervisor holding a lifeline
(``dataplane.lifeline``) the worker also stops when the supervisor dies.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading

from dataplane import lifeline
from dataplane.files import replace_file
from mirror.config import ConfigError, load_config
from mirror.copier import Copier
from mirror.status import StatusServer

log = logging.getLogger("mirror")

# SIGTERM to exit, at most: a request under way (5 s), the flush (10 s), the clients'
# closing; past it the worker exits anyway (the next one resumes exactly).
STOP_TIMEOUT_S = 20.0
EXIT_GRACE_S = 5.0  # then the rest of the exit, at most


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="meridian-mirror", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="the worker's configuration (JSON, 0600)")
    p.add_argument(
        "--status-listen", default="127.0.0.1:0", type=_host_port, help="HOST:PORT of /status"
    )
    p.add_argument("--ready-file", help="written once serving: pid, status_port, generation")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(
            f"{address!r} is not HOST:PORT (a port 0-65535, e.g. 127.0.0.1:0)"
        )
    return host.strip("[]") or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    lifeline.watch()
    try:
        config = load_config(args.config)
        copier = Copier(config)  # reads the client secret
    except ConfigError as err:
        raise SystemExit(f"meridian-mirror: {err}") from None
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    try:
        server = StatusServer(args.status_listen, copier)
    except OSError as err:
        raise SystemExit(f"meridian-mirror: --status-listen: {err.strerror or err}") from None
    server.start()
    copying = threading.Thread(target=copier.run, args=(stopping,), name="copier", daemon=True)
    copying.start()
    if args.ready_file:
        ready = {"pid": os.getpid(), "status_port": server.port, "generation": config.generation}
        replace_file(args.ready_file, json.dumps(ready).encode())
    log.info(
        "mirror %s (generation %d) %s -> %s: status on port %d",
        config.link, config.generation, config.from_region, config.to_region, server.port,
    )  # fmt: skip
    while not stopping.wait(1.0):  # woken now and then: a signal's handler runs promptly
        pass
    log.info("stopping: flushing what is in flight")
    # Past the deadline the worker exits whatever still runs: the status server's
    # shutdown, a client's thread or the interpreter's exit joining an executor's threads
    # blocked on brokers that are gone (the next worker resumes exactly).
    deadline = threading.Timer(STOP_TIMEOUT_S + EXIT_GRACE_S, _exit_now, args=("its exit",))
    deadline.daemon = True
    deadline.start()
    copying.join(STOP_TIMEOUT_S)
    if copying.is_alive():
        _exit_now("copying")
    server.shutdown()
    return 0


def _exit_now(what: str) -> None:
    log.warning("%s not done within %.0f s of the stop: exiting anyway", what, STOP_TIMEOUT_S)
    logging.shutdown()
    os._exit(0)  # the clients' threads are left behind; the next worker resumes


if __name__ == "__main__":
    raise SystemExit(main())
