"""Test tiers: which tests need what, decided in one place at collection.

``services``: the test needs Postgres, Redis or Keycloak (``./dev services up``). Every
test under ``tests/controlplane/`` and ``tests/integration/`` does: the control plane is
a Django project on Postgres, its jobs run on Celery over Redis, and its identity tests
talk to Keycloak; so does every browser test under ``tests/web/`` (Chromium driving the
console of a live control plane, signing in at Keycloak).

``processes``: the test starts real processes (brokers, the CLI, a crashing writer): its
module, or a module defining one of its fixtures, uses ``subprocess`` or the launchers
in ``PROCESS_LAUNCHERS``.

``slow``: a long-running test (crash loops, fault injection, large logs, load), marked
where it is written.

``./dev test --fast`` runs ``-m "not services and not processes and not slow"``: the
storage engine, the record codec, the SDK's and the CLI's own logic, in about a minute
with nothing to start. ``./dev test`` runs everything.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

TESTS_ROOT = Path(__file__).resolve().parents[1]
SERVICE_FOLDERS = ("controlplane", "integration", "web")
PROCESS_LAUNCHERS = (
    "subprocess",
    "multiprocessing",
    "dataplane.local",
    "dataplane.demo",
    "tests.support.brokers",
    "tests.support.replication",
    "tests.support.controlplane",
    "tests.support.demo",
    "tests.support.databus",
    "tests.support.kafka_jvm",
    "tests.support.mirror",
    "tests.support.s3",
)


def mark_tiers(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(item.path).resolve().relative_to(TESTS_ROOT).parts
        if parts and parts[0] in SERVICE_FOLDERS:
            item.add_marker(pytest.mark.services)
        elif _starts_processes(item):
            item.add_marker(pytest.mark.processes)


def _starts_processes(item: pytest.Item) -> bool:
    modules = {getattr(item, "module", None)}
    fixture_info = getattr(item, "_fixtureinfo", None)
    if fixture_info is not None:
        for definitions in fixture_info.name2fixturedefs.values():
            for definition in definitions:
                func = getattr(definition, "func", None)
                if func is not None:
                    modules.add(_module_of(func))
    return any(module is not None and _uses_launchers(module) for module in modules)


def _module_of(func: object) -> ModuleType | None:
    return sys.modules.get(getattr(func, "__module__", "") or "")


def _uses_launchers(module: ModuleType) -> bool:
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", "")
        if isinstance(name, str) and name.startswith(PROCESS_LAUNCHERS):
            return True
    return False
