"""``meridian-control <command>``: the control plane's management commands (Django's
``manage.py``: ``migrate``, ``bootstrap_identity``, ``create_platform_admin``, ...)."""

from __future__ import annotations

import os
import sys

from django.core.management import execute_from_command_line


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    execute_from_command_line(["meridian-control", *sys.argv[1:]])
