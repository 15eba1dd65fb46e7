"""The provider's Go tests, acceptance tests included (``TF_ACC=1``), in one ``go
test`` run against the session's demo: OpenTofu (terraform-plugin-testing drives the
CLI ``terraform/tools.sh`` found or built) creates, changes in place, replaces, imports
and destroys every kind of resource, sees changes made through the API behind its back
as drift, and a tenant's credentials cannot touch another tenant's resources
(``terraform/provider/internal/provider/*_acc_test.go``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.demo import Demo
from tests.support.terraform import PROVIDER_DIR, TerraformTools, clean_env

GO_TEST_TIMEOUT_S = 1500


def _declared_tests() -> set[str]:
    """Every ``func TestX(t *testing.T)`` of the provider's Go tests."""
    names: set[str] = set()
    for source in (PROVIDER_DIR / "internal" / "provider").glob("*_test.go"):
        names.update(re.findall(r"^func (Test\w+)\(t \*testing\.T\)", source.read_text(), re.M))
    return names


def test_every_go_test_of_the_provider_passes_against_the_demo(
    terraform_tools: TerraformTools, terraform_demo: Demo, tmp_path: Path
) -> None:
    cli_config = tmp_path / "empty.tfrc"  # the tests' provider is in-process: no mirror
    cli_config.write_text("")
    env = clean_env(
        {
            "TF_ACC": "1",
            "TF_ACC_TERRAFORM_PATH": str(terraform_tools.tofu),
            "TF_CLI_CONFIG_FILE": str(cli_config),
            "MERIDIAN_API_URL": f"http://127.0.0.1:{terraform_demo.api_port}",
            "MERIDIAN_ADMIN_TOKEN": terraform_demo.admin_token,
            "MERIDIAN_TEST_REGION": "east",
            "MERIDIAN_TEST_OTHER_REGION": "west",
        }
    )
    if terraform_tools.is_opentofu:
        # A configuration's `meridian` is registry.opentofu.org/hashicorp/meridian there.
        env["TF_ACC_PROVIDER_HOST"] = "registry.opentofu.org"
    command = ["go", "test", "./internal/provider", "-count=1", "-v", "-parallel=4"]
    command += [f"-timeout={GO_TEST_TIMEOUT_S - 60}s"]
    done = subprocess.run(
        command,
        cwd=PROVIDER_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=GO_TEST_TIMEOUT_S,
    )
    output = done.stdout + done.stderr
    outcomes = dict(
        (name, outcome)
        for outcome, name in re.findall(r"^--- (PASS|FAIL|SKIP): (\w+)", output, re.M)
    )
    assert done.returncode == 0, output[-30000:]
    declared = _declared_tests()
    assert any(name.startswith("TestAcc") for name in declared)
    # Not one skipped: an acceptance test that skips proved nothing.
    assert {name: outcomes.get(name) for name in declared} == dict.fromkeys(declared, "PASS"), (
        output[-30000:]
    )
