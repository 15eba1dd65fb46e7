"""``python -m controlplane <command>``: the same as ``meridian-control``."""

from controlplane.cli import main

main()
