"""Terraform's tools for the tests: ``terraform/tools.sh`` builds Meridian's provider
into a filesystem mirror (with the CLI configuration that names it) and finds ``tofu``
on PATH or builds OpenTofu from its Go module, caching both under ``.services/``.

    tools = build_tools()                       # TerraformTools: tofu, provider, ...
    run_tofu(tools, ["apply", "-auto-approve"], cwd=workdir, env={...})

``run_tofu`` runs the CLI with a clean environment (none of the caller's ``TF_*`` or
``MERIDIAN_*``), its telemetry off, no prompts, and umask 077: the state it writes holds
service accounts' secrets."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.brokers import REPO_ROOT

TOOLS_SCRIPT = REPO_ROOT / "terraform" / "tools.sh"
PROVIDER_DIR = REPO_ROOT / "terraform" / "provider"
BUILD_TIMEOUT_S = 1800.0  # OpenTofu from source on a new machine, with its modules
TOFU_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class TerraformTools:
    tofu: Path
    provider: Path
    provider_version: str
    cli_config: Path  # TF_CLI_CONFIG_FILE: meridian/* from the filesystem mirror

    @property
    def is_opentofu(self) -> bool:
        """Whether the CLI is OpenTofu (whose registry host is registry.opentofu.org)."""
        shown = subprocess.run(
            [str(self.tofu), "version"], capture_output=True, text=True, timeout=60, check=True
        )
        return shown.stdout.startswith("OpenTofu")


def build_tools() -> TerraformTools:
    """Run ``terraform/tools.sh`` (quick once its outputs are cached) and read what it
    printed."""
    done = subprocess.run(
        ["bash", str(TOOLS_SCRIPT)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert done.returncode == 0, f"terraform/tools.sh failed:\n{done.stdout}\n{done.stderr}"
    printed = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return TerraformTools(
        tofu=Path(printed["TOFU"]),
        provider=Path(printed["PROVIDER"]),
        provider_version=printed["PROVIDER_VERSION"],
        cli_config=Path(printed["TF_CLI_CONFIG_FILE"]),
    )


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without Terraform's or Meridian's settings, plus
    ``extra`` and the CLI's quiet defaults."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "MERIDIAN_"))}
    env.update({"CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_INPUT": "0"})
    env.update(extra)
    return env


def run_tofu(
    tools: TerraformTools,
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``tofu ARGS`` in ``cwd`` with the filesystem mirror's CLI configuration and
    ``env``; with ``check``, a failure is an assertion showing its output."""
    full_env = clean_env({"TF_CLI_CONFIG_FILE": str(tools.cli_config), **env})
    done = subprocess.run(
        [str(tools.tofu), args[0], "-no-color", *args[1:]],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=TOFU_TIMEOUT_S,
        umask=0o077,
    )
    if check:
        assert done.returncode == 0, f"tofu {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


CHECKOV_VERSION = "3.3.30"


def checkov() -> Path:
    """checkov (the static security scanner) in a venv of its own under ``.services/``,
    made on first use: it pins boto3 to a version the platform's packages cannot share."""
    services = Path(os.environ.get("MERIDIAN_SERVICES_DIR") or REPO_ROOT / ".services")
    venv = services / "terraform" / f"checkov-{CHECKOV_VERSION}"
    binary = venv / "bin" / "checkov"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, f"checkov=={CHECKOV_VERSION}"], check=True, timeout=BUILD_TIMEOUT_S)
    return binary
