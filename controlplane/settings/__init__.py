"""Control-plane settings, split by concern; every value comes from the environment
(``settings.env.env``). Required: ``MERIDIAN_DATABASE_URL``.

``controlplane.settings.testing`` (what pytest uses) fills in the test services that
``./dev services up`` starts; those defaults must be in the environment before the
concern modules below read it, so they are applied here, first."""

import os as _os

if _os.environ.get("DJANGO_SETTINGS_MODULE") == "controlplane.settings.testing":
    from controlplane.settings.test_services import apply_defaults as _apply_defaults

    _apply_defaults()

from controlplane.settings.api import *  # noqa: F403
from controlplane.settings.base import *  # noqa: F403
from controlplane.settings.celery import *  # noqa: F403
from controlplane.settings.console import *  # noqa: F403
from controlplane.settings.database import *  # noqa: F403
from controlplane.settings.identity import *  # noqa: F403
from controlplane.settings.platform import *  # noqa: F403
