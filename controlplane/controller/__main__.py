"""The controller process: ``python -m controlplane.controller --region NAME [--id ID]``.

Runs until SIGTERM or SIGINT (then gives its lease up and exits 0). Start one or more per
region: one is active, the others are standbys that take over when it dies. Needs the
control plane's settings (``MERIDIAN_DATABASE_URL`` ...), like every Django command.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys

import django


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m controlplane.controller")
    parser.add_argument("--region", required=True, help="the region this controller runs")
    parser.add_argument("--id", dest="controller_id", help="default: <hostname>:<pid>")
    parser.add_argument("--log-level", default=os.environ.get("MERIDIAN_LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()
    from django.conf import settings

    from controlplane.controller.controller import Controller, run_forever
    from controlplane.controller.lease import lease_for
    from controlplane.regions.models import Region

    if not Region.objects.filter(name=args.region).exists():
        print(f"controller: no region named {args.region!r}", file=sys.stderr)
        return 2
    controller_id = args.controller_id or f"{socket.gethostname()}:{os.getpid()}"
    controller = Controller(args.region, controller_id, lease_for(args.region))
    stopping: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: stopping.append(number))
    logging.getLogger(__name__).info("controller %s for %s (standby until it holds the lease)",
                                     controller_id, args.region)  # fmt: skip
    try:
        run_forever(controller, settings.CONTROLLER_TICK_S, lambda: bool(stopping))
    finally:
        controller.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
