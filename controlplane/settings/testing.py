"""Settings for the test suite: the services ``./dev test`` starts, unless the
environment names others."""

import os

os.environ.setdefault(
    "MERIDIAN_DATABASE_URL", "postgres://meridian:meridian@127.0.0.1:55432/meridian"
)
os.environ.setdefault("MERIDIAN_CELERY_BROKER_URL", "redis://127.0.0.1:56379/0")
os.environ.setdefault("MERIDIAN_KEYCLOAK_URL", "http://127.0.0.1:58080")

from controlplane.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
