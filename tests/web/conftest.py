"""Browser tests of the console: Playwright driving Debian's Chromium (``/usr/bin/chromium``
or ``$MERIDIAN_CHROMIUM``; ``./dev test`` installs it, never a browser of Playwright's),
against the control plane served by pytest-django's ``live_server``.

``browser``: one Chromium for the session. ``ui``: a fresh browser context (no cookies)
and page for one test, whose ``check(name)`` screenshots the page into the artifacts
directory (``$MERIDIAN_ARTIFACTS``, default ``var/test-artifacts/``, one folder per test)
and runs axe-core (``tests/web/node_modules/axe-core``, pinned in ``package-lock.json``)
on it, failing on any serious or critical violation; ``shot(name)`` only screenshots
(pages that are not the console's, like Keycloak's login).

``console``: the live server, with the control plane's API and console URLs pointing at
it and the local issuer as identity provider; ``keycloak_console`` switches to a
Keycloak realm of this session whose ``meridian-console`` client redirects to it."""

from __future__ import annotations

import functools
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import override_settings
from playwright.sync_api import Browser, Page, sync_playwright

from controlplane.accounts.identity import reset_identity
from controlplane.accounts.keycloak_setup import delete_realm
from tests.support.brokers import REPO_ROOT

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
# between browser steps are still plain synchronous calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

AXE = Path(__file__).parent / "node_modules" / "axe-core" / "axe.min.js"


@functools.cache
def axe_source() -> str:
    return AXE.read_text()


BLOCKING_IMPACTS = {"serious", "critical"}
TIMEOUT_MS = 15_000


def artifacts_dir() -> Path:
    return Path(os.environ.get("MERIDIAN_ARTIFACTS") or REPO_ROOT / "var" / "test-artifacts")


# Per module, not per session: Playwright's sync API keeps an asyncio loop running in the
# main thread while it is open, and tests of other folders (which run in between, ordered
# by tier) call asyncio.run.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = os.environ.get("MERIDIAN_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        pytest.fail("Debian's Chromium is not installed: ./dev test installs it")
    if not AXE.exists():
        pytest.fail(f"axe-core is missing ({AXE}): ./dev test installs it (npm ci)")
    with sync_playwright() as playwright:
        # --no-sandbox: the tests may run as root (CI), where Chromium's sandbox refuses.
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Ui:
    """A test's page, and the record of what it showed."""

    page: Page
    folder: Path
    shots: list[Path] = field(default_factory=list)

    def shot(self, name: str) -> Path:
        path = self.folder / f"{len(self.shots) + 1:02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        self.shots.append(path)
        return path

    def check(self, name: str) -> None:
        """Screenshot, then axe-core: no serious or critical violation."""
        self.shot(name)
        # Evaluated, not added as a <script>: the console's CSP forbids inline scripts,
        # and the check must not loosen the policy it runs under.
        self.page.evaluate(axe_source())
        result: dict[str, Any] = self.page.evaluate(
            "async () => await axe.run(document, {resultTypes: ['violations']})"
        )
        blocking = [v for v in result["violations"] if v.get("impact") in BLOCKING_IMPACTS]
        assert not blocking, f"{name} ({self.page.url}): " + "; ".join(
            f"{v['id']} ({v['impact']}): {v['help']} at "
            + ", ".join(str(n["target"]) for n in v["nodes"][:3])
            for v in blocking
        )


@pytest.fixture
def ui(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Ui]:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    folder = artifacts_dir() / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    try:
        yield Ui(page, folder)
    finally:
        context.close()


@pytest.fixture
def console(live_server: Any, transactional_db: None, settings: Any) -> str:
    """The live server's base URL; the local issuer signs people in."""
    settings.API_BASE_URL = live_server.url
    settings.CONSOLE_URL = f"{live_server.url}/console/"
    settings.IDENTITY_PROVIDER = "local"
    reset_identity()
    return str(live_server.url)


def _keycloak_up() -> bool:
    try:
        return requests.get(f"{django_settings.KEYCLOAK_URL}/realms/master", timeout=5).ok
    except requests.RequestException:
        return False


@pytest.fixture(scope="session")
def keycloak_realm(live_server: Any) -> Iterator[str]:
    """A realm of this session, bootstrapped as operators do, whose console client
    redirects to the live server."""
    if not _keycloak_up():
        pytest.fail(
            f"Keycloak is not answering at {django_settings.KEYCLOAK_URL}: ./dev services up"
        )
    realm = f"meridian-web-{uuid.uuid4().hex[:8]}"
    with override_settings(
        IDENTITY_PROVIDER="keycloak",
        KEYCLOAK_REALM=realm,
        API_BASE_URL=live_server.url,
        CONSOLE_URL=f"{live_server.url}/console/",
    ):
        call_command("bootstrap_identity")
        try:
            yield realm
        finally:
            delete_realm(realm)


@pytest.fixture
def keycloak_console(console: str, keycloak_realm: str, settings: Any) -> str:
    """As ``console``, with the session's Keycloak realm as identity provider."""
    settings.IDENTITY_PROVIDER = "keycloak"
    settings.KEYCLOAK_REALM = keycloak_realm
    reset_identity()
    return console
