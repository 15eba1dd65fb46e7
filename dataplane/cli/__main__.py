"""``python -m dataplane.cli``: the ``meridian`` command."""

from dataplane.cli import main

main()
