"""The import contracts in pyproject.toml hold, and every control-plane package is placed
in the layers, so a new app cannot join the tree without choosing its place."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
NOT_APPS = {"settings", "migrations", "__pycache__"}


def _contract(contract_id: str) -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in config["contracts"] if c["id"] == contract_id)


def test_contracts_kept() -> None:
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_control_plane_package_has_a_layer() -> None:
    layers = _contract("controlplane-apps")["layers"]
    assert isinstance(layers, list)
    placed = {name.strip() for layer in layers for name in layer.split("|")}
    packages = {
        path.parent.name
        for path in (ROOT / "controlplane").glob("*/__init__.py")
        if path.parent.name not in NOT_APPS
    }
    assert packages - placed == set()
