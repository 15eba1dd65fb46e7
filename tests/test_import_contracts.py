"""The import contracts in pyproject.toml hold, and every control-plane package is placed
in the layers, so a new app cannot join the tree without choosing its place."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterator
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


def test_the_layers_hold_without_exceptions() -> None:
    """Every concept has one owner: no import is let through against the order."""
    assert _contract("controlplane-apps").get("ignore_imports", []) == []


# Imports inside functions, allowed where they wait for Django to be set up (an
# ``AppConfig.ready``, or an entry point after ``django.setup()``), never to dodge a cycle.
DEFERRED_IMPORTS_ALLOWED = {
    ("controlplane/demo.py", "prepare_database"),
    ("controlplane/demo.py", "_stop_provisioned"),
    ("controlplane/controller/__main__.py", "main"),
}


def _imports_in_functions(path: Path) -> Iterator[tuple[str, str]]:
    """(function name, imported module) for each ``controlplane`` import in a function."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("controlplane"):
                yield function.name, node.module or ""
            elif isinstance(node, ast.Import):
                yield from (
                    (function.name, a.name) for a in node.names if a.name.startswith("controlplane")
                )


def test_no_import_hides_in_a_function_to_dodge_a_cycle() -> None:
    found = []
    for path in sorted((ROOT / "controlplane").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for function, module in _imports_in_functions(path):
            allowed = (relative, function) in DEFERRED_IMPORTS_ALLOWED
            if not allowed and not (path.name == "apps.py" and function == "ready"):
                found.append(f"{relative}: {function}() imports {module}")
    assert found == []
