"""The ``meridian`` command line (typer): produce, consume, topics, groups, offsets and lanes.

``meridian --help`` lists the commands; every command talks to the cluster through the
SDK (``dataplane.client``), found with ``--bootstrap`` or ``MERIDIAN_BOOTSTRAP``, except
``lanes``, which calls the control plane's REST API (``--api`` or ``MERIDIAN_API_URL``)
with the same credentials.
"""

from dataplane.cli.main import app, main

__all__ = ["app", "main"]
