"""Control-plane settings, split by concern; every value comes from the environment
(``settings.env.env``). Required: ``MERIDIAN_DATABASE_URL``. ``controlplane.settings.testing``
fills in the test services that ``./dev test`` starts."""

from controlplane.settings.api import *  # noqa: F403
from controlplane.settings.base import *  # noqa: F403
from controlplane.settings.celery import *  # noqa: F403
from controlplane.settings.database import *  # noqa: F403
from controlplane.settings.identity import *  # noqa: F403
from controlplane.settings.platform import *  # noqa: F403
