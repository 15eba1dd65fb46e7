"""The SDK installs alone: a fresh venv, `pip install meridian` from the tree, nothing else.

Installs with the lock file as constraints (the versions the project tests with), from the
package index, then runs the ``meridian`` CLI and imports the SDK with no platform package
(Django, Celery, ...) present.
"""

from __future__ import annotations

import shutil
import subprocess
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dataplane", "controlplane", "lanes", "databus", "mirror", "spark", "web")
PLATFORM = ("django", "celery", "rest_framework", "psycopg", "keycloak", "prometheus_client")
PROBE = f"""
import importlib.util, sys
import dataplane.client, dataplane.cli
from dataplane.client import Producer, Consumer, Admin
present = [m for m in {PLATFORM!r} if importlib.util.find_spec(m) is not None]
sys.exit(f"platform packages installed with the SDK: {{present}}" if present else 0)
"""


def _copy_tree(target: Path) -> Path:
    """The files a build reads, copied so building never writes into the work tree."""
    source = target / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy2(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=ignore)
    return source


def _run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, f"{argv}: {result.stdout}\n{result.stderr}"
    return result


def test_sdk_installs_alone_and_runs(tmp_path: Path) -> None:
    source = _copy_tree(tmp_path)
    venv.create(tmp_path / "venv", with_pip=True)
    bin_dir = tmp_path / "venv" / "bin"
    pip = [bin_dir / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # --no-compile: the probe below imports a handful of modules, not every dependency.
    _run(*pip, "--no-compile", "-c", source / "constraints.txt", source)
    assert "Usage" in _run(bin_dir / "meridian", "--help").stdout
    _run(bin_dir / "python", "-c", PROBE)
