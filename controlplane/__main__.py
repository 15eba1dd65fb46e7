"""``python -m controlplane <django command>``: Django's manage.py."""

import os
import sys

from django.core.management import execute_from_command_line

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
execute_from_command_line([sys.argv[0], *sys.argv[1:]])
