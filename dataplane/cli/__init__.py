"""The ``meridian`` command line (typer): produce, consume, topics, groups, offsets and lanes.

``meridian --help`` lists the commands; every command talks to the cluster through the
SDK (``dataplane.client``), found with ``--bootstrap`` or ``MERIDIAN_BOOTSTRAP``.
"""

from dataplane.cli.main import app, main

__all__ = ["app", "main"]
