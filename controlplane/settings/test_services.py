"""Where the test suite finds its services: the ones ``./dev services up`` starts,
unless the environment names others."""

import os

DEFAULTS = {
    "MERIDIAN_DATABASE_URL": "postgres://meridian:meridian@127.0.0.1:55432/meridian",
    "MERIDIAN_CELERY_BROKER_URL": "redis://127.0.0.1:56379/0",
    "MERIDIAN_KEYCLOAK_URL": "http://127.0.0.1:58080",
}


def apply_defaults() -> None:
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)
