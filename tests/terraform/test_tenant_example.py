"""``terraform/examples/tenant/`` as a user runs it against the demo: ``tofu init``
installs the provider from the filesystem mirror ``terraform/tools.sh`` made, ``apply``
makes the topic, the service account and its ACL entry (seen through the API and on the
console's pages, the secret working at the token endpoint, the state private), a
retention changed in the HCL is applied in place, a second plan has nothing to do, and
``destroy`` removes all three."""

from __future__ import annotations

import json
import re
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.brokers import REPO_ROOT
from tests.support.demo import Demo
from tests.support.terraform import TerraformTools, run_tofu

EXAMPLE = REPO_ROOT / "terraform" / "examples" / "tenant"
TOPIC = "demo.payments"
CLIENT_ID = "demo--payments-app"
ONE_DAY_MS = 86_400_000


@pytest.fixture
def workdir(
    tmp_path: Path, terraform_tools: TerraformTools, terraform_demo: Demo
) -> Iterator[Path]:
    """A copy of the example; whatever it made is destroyed at the end, pass or fail,
    so the session's demo is left as it was."""
    folder = tmp_path / "tenant"
    shutil.copytree(EXAMPLE, folder)
    try:
        yield folder
    finally:
        if _managed(folder / "terraform.tfstate"):
            run_tofu(terraform_tools, ["destroy", "-auto-approve"], cwd=folder,
                     env=_env(terraform_demo), check=False)  # fmt: skip


def _managed(state: Path) -> bool:
    """Whether the state file holds any resource (one left by a failed test)."""
    return state.exists() and bool(json.loads(state.read_text()).get("resources"))


def _env(demo: Demo) -> dict[str, str]:
    """The example's provider settings, as docs/terraform.md gives them for the demo: the
    API URL and the demo's platform-admin token."""
    return {
        "MERIDIAN_API_URL": f"http://127.0.0.1:{demo.api_port}",
        "MERIDIAN_TOKEN": demo.admin_token,
    }


def _api(demo: Demo, path: str) -> Any:
    status, body = demo.call("GET", path, token=demo.admin_token)
    assert status == 200, (path, status, body)
    return body


def _console(demo: Demo) -> requests.Session:
    """A session signed in to the console as the demo's tenant admin, at the local
    issuer's form."""
    users = re.findall(r"^  (\S+)\s+(\S+)\s+password (\S+)$", demo.output, re.MULTILINE)
    username, password = next((u, p) for role, u, p in users if role == "tenant-admin")
    session = requests.Session()
    form = session.get(f"http://127.0.0.1:{demo.api_port}/console/", timeout=30)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    fields = {"csrfmiddlewaretoken": csrf.group(1), "username": username, "password": password}
    signed_in = session.post(form.url, fields, timeout=30)
    assert signed_in.url.endswith("/console/t/demo/"), signed_in.url
    return session


def _planned_actions(tools: TerraformTools, workdir: Path, env: dict[str, str]) -> dict[str, Any]:
    run_tofu(tools, ["plan", "-out=tfplan"], cwd=workdir, env=env)
    shown = run_tofu(tools, ["show", "-json", "tfplan"], cwd=workdir, env=env)
    plan = json.loads(shown.stdout)
    return {change["address"]: change["change"] for change in plan["resource_changes"]}


def test_the_tenant_example_applies_changes_in_place_and_destroys(
    terraform_tools: TerraformTools, terraform_demo: Demo, workdir: Path
) -> None:
    demo, env = terraform_demo, _env(terraform_demo)
    run_tofu(terraform_tools, ["init"], cwd=workdir, env=env)
    run_tofu(terraform_tools, ["apply", "-auto-approve"], cwd=workdir, env=env)

    # The API has the three objects the HCL declares.
    topic = _api(demo, f"/topics/{TOPIC}")
    assert (topic["status"], topic["partitions"], topic["retention_ms"]) == ("ready", 3, ONE_DAY_MS)
    accounts = _api(demo, "/service-accounts?tenant=demo&name=payments-app")["results"]
    assert [a["client_id"] for a in accounts] == [CLIENT_ID]
    acls = _api(demo, f"/topic-acls?topic={TOPIC}")["results"]
    assert [(a["principal"], sorted(a["operations"])) for a in acls] == [
        (CLIENT_ID, ["consume", "produce"])
    ]
    # The state holds the secret: private to its owner; and the secret is the account's.
    state_mode = stat.S_IMODE((workdir / "terraform.tfstate").stat().st_mode)
    assert state_mode == 0o600, oct(state_mode)
    secret = run_tofu(terraform_tools, ["output", "-raw", "client_secret"], cwd=workdir, env=env)
    token = requests.post(
        demo.token_url,
        data={"grant_type": "client_credentials", "client_id": CLIENT_ID,
              "client_secret": secret.stdout},
        timeout=30,
    )  # fmt: skip
    assert token.status_code == 200, token.text

    # ... and the console shows them to the tenant's admin.
    console = _console(demo)
    base = f"http://127.0.0.1:{demo.api_port}/console/t/demo"
    assert TOPIC in console.get(f"{base}/topics/", timeout=30).text
    assert "payments-app" in console.get(f"{base}/service-accounts/", timeout=30).text
    acl_page = console.get(f"{base}/acls/", timeout=30).text
    assert CLIENT_ID in acl_page
    assert TOPIC in acl_page

    # A retention changed in the HCL is an update in place, of the topic alone.
    main_tf = workdir / "main.tf"
    main_tf.write_text(main_tf.read_text().replace("= 86400000", "= 172800000"))
    changes = _planned_actions(terraform_tools, workdir, env)
    assert changes["meridian_topic.payments"]["actions"] == ["update"]
    assert changes["meridian_topic.payments"]["after"]["retention_ms"] == 2 * ONE_DAY_MS
    assert changes["meridian_service_account.payments_app"]["actions"] == ["no-op"]
    assert changes["meridian_topic_acl.payments_app"]["actions"] == ["no-op"]
    run_tofu(terraform_tools, ["apply", "tfplan"], cwd=workdir, env=env)
    changed = _api(demo, f"/topics/{TOPIC}")
    assert (changed["status"], changed["retention_ms"]) == ("ready", 2 * ONE_DAY_MS)
    assert changed["created_at"] == topic["created_at"]  # the same topic, not a new one
    again = run_tofu(terraform_tools, ["plan", "-detailed-exitcode"], cwd=workdir, env=env)
    assert again.returncode == 0, again.stdout  # nothing left to do

    run_tofu(terraform_tools, ["destroy", "-auto-approve"], cwd=workdir, env=env)
    status, _ = demo.call("GET", f"/topics/{TOPIC}", token=demo.admin_token)
    assert status == 404
    assert _api(demo, "/service-accounts?tenant=demo&name=payments-app")["results"] == []
    assert _api(demo, f"/topic-acls?topic={TOPIC}")["results"] == []
