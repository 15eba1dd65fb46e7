"""Settings for the test suite (the services' defaults are applied by the package's
``__init__``). Each pytest run gets its own test database, so concurrent runs on one
Postgres never drop each other's."""

import os

from controlplane.settings import *  # noqa: F403
from controlplane.settings import DATABASES

DATABASES["default"]["TEST"] = {
    "NAME": os.environ.get("MERIDIAN_TEST_DATABASE", f"test_meridian_{os.getpid()}")
}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
