"""The SDK installs alone: its wheel, built from the tree, holds the SDK and nothing of the
platform, and installs into a fresh venv with nothing else.

Builds ``sdk/`` (the ``meridian`` distribution) into a wheel, reads the wheel's file list,
installs it with the lock file as constraints (the versions the project tests with), from
the package index, then runs the ``meridian`` CLI and imports the SDK with no platform
package (Django, Celery, ...) and no platform module (control plane, broker, storage)
present.
"""

from __future__ import annotations

import shutil
import subprocess
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dataplane", "controlplane", "lanes", "databus", "mirror", "spark", "web")
PLATFORM = ("django", "celery", "rest_framework", "psycopg", "keycloak", "prometheus_client")
PLATFORM_MODULES = ("controlplane", "dataplane.broker", "dataplane.storage")
PLATFORM_PATHS = ("controlplane/", "dataplane/broker/", "dataplane/storage/")
PROBE = f"""
import importlib.util, sys
import dataplane.client, dataplane.cli
from dataplane.client import Producer, Consumer, Admin
import lanes
assert lanes.lane_topic("acme.orders", "ppe") == "acme.orders~ppe"
present = [m for m in {PLATFORM!r} if importlib.util.find_spec(m) is not None]
present += [m for m in {PLATFORM_MODULES!r} if importlib.util.find_spec(m) is not None]
sys.exit(f"platform packages installed with the SDK: {{present}}" if present else 0)
"""


def _copy_tree(target: Path) -> Path:
    """The files a build reads, copied so building never writes into the work tree. The
    whole tree is copied, platform too: the wheel must leave it out by itself."""
    source = target / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy2(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in (*PACKAGES, "sdk"):
        shutil.copytree(ROOT / package, source / package, ignore=ignore)
    return source


def _run(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, cwd=cwd)
    assert result.returncode == 0, f"{argv}: {result.stdout}\n{result.stderr}"
    return result


def test_sdk_installs_alone_and_runs(tmp_path: Path) -> None:
    source = _copy_tree(tmp_path)
    venv.create(tmp_path / "venv", with_pip=True)
    bin_dir = tmp_path / "venv" / "bin"
    pip = [bin_dir / "python", "-m", "pip", "--disable-pip-version-check"]
    _run(*pip, "wheel", "--quiet", "--no-deps", "-w", tmp_path / "dist", source / "sdk")
    (wheel,) = (tmp_path / "dist").glob("meridian-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dataplane/client/__init__.py" in names
    assert [n for n in names if n.startswith(PLATFORM_PATHS)] == []
    # --no-compile: the probe below imports a handful of modules, not every dependency.
    _run(*pip, "install", "--quiet", "--no-compile", "-c", source / "constraints.txt", wheel)
    assert "Usage" in _run(bin_dir / "meridian", "--help").stdout
    # Run from elsewhere than the tree, so only what was installed can be imported.
    _run(bin_dir / "python", "-c", PROBE, cwd=tmp_path)
