"""Packaging: the SDK installs alone, and every package the code imports is declared.

``pip install meridian`` is the SDK (``dataplane.client``), the ``meridian`` CLI and the
generated protocol code; ``meridian[platform]`` adds what brokers and the control plane need;
``[dev]`` what tests, benchmarks and the protocol generator need. These tests read the imports
with ``ast`` (nothing is imported) and check them against ``pyproject.toml``; the module
``test_sdk_install.py`` installs the SDK into a fresh venv.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SDK_ROOTS = ("dataplane/client", "dataplane/cli", "dataplane/_gen")
SHIPPED = ("dataplane", "controlplane", "lanes", "databus", "mirror", "spark", "web")
# The protocol generator is a developer's command (./dev proto), run from the dev install.
DEV_ONLY_FILES = ("dataplane/proto/gen.py",)
PLATFORM_ONLY = {"django", "celery", "rest_framework", "psycopg", "keycloak", "prometheus_client"}


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _names(requirements: Iterable[str]) -> set[str]:
    """Normalised distribution names of requirement strings (PEP 503)."""
    return {_normalise(re.split(r"[\[<>=!~;\s]", req, maxsplit=1)[0]) for req in requirements}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(*extras: str) -> set[str]:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    names = _names(project["dependencies"])
    for extra in extras:
        names |= _names(project["optional-dependencies"][extra])
    return names


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """Every absolute module imported by ``path`` (anywhere in it), with its relative depth."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(path, node.module or "", node.level)
            yield base, 0
            yield from ((f"{base}.{alias.name}", 1) for alias in node.names)


def _absolute(path: Path, module: str, level: int) -> str:
    if level == 0:
        return module
    package = path.relative_to(ROOT).with_suffix("").parts[:-level]
    return ".".join([*package, module] if module else package)


def _source_of(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _first_party(module: str) -> bool:
    return module.split(".")[0] in SHIPPED


def _third_party(module: str) -> bool:
    top = module.split(".")[0]
    # meridian_codec: the record codec's compiled loops, built from native/ by ./dev; an
    # optional import (the Python loops run without it), so no distribution declares it.
    own = (*SHIPPED, "tests", "bench", "__future__", "meridian_codec")
    return top not in own and top not in sys.stdlib_module_names


def _sdk_files() -> set[Path]:
    """The SDK's own files and every first-party module they import, transitively."""
    pending = [p for root in SDK_ROOTS for p in (ROOT / root).rglob("*.py")]
    seen: set[Path] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for module, _ in _imports(path):
            if _first_party(module):
                pending.extend(_sources_with_parents(module))
    return seen


def _sources_with_parents(module: str) -> list[Path]:
    """Importing ``a.b.c`` runs ``a/__init__``, ``a/b/__init__`` and ``a/b/c``."""
    parts = module.split(".")
    found = (_source_of(".".join(parts[:i])) for i in range(1, len(parts) + 1))
    return [path for path in found if path is not None]


def _third_party_imports(files: Iterable[Path]) -> dict[str, set[str]]:
    """Top-level third-party import name -> the files (relative) that import it."""
    found: dict[str, set[str]] = {}
    for path in files:
        for module, depth in _imports(path):
            if depth == 0 and _third_party(module):
                found.setdefault(module.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def _undeclared(imports: dict[str, set[str]], declared: set[str]) -> dict[str, set[str]]:
    """The imports no declared distribution provides (looked up in the installed env)."""
    providers = importlib.metadata.packages_distributions()
    return {
        name: files
        for name, files in imports.items()
        if not declared & {_normalise(dist) for dist in providers.get(name, [name])}
    }


def _local_modules(folder: Path) -> set[str]:
    """Modules a script folder imports from itself (bench/ runs its scripts from there)."""
    return {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if p.is_dir()}


def test_sdk_declares_every_third_party_package_it_imports() -> None:
    undeclared = _undeclared(_third_party_imports(_sdk_files()), _declared())
    assert undeclared == {}, "the SDK imports packages `pip install meridian` does not bring"


def test_sdk_imports_nothing_of_the_platform() -> None:
    files = _sdk_files()
    imported = _third_party_imports(files)
    assert PLATFORM_ONLY.isdisjoint(imported), {
        k: imported[k] for k in PLATFORM_ONLY & imported.keys()
    }
    reached = {str(p.relative_to(ROOT)) for p in files}
    assert not {p for p in reached if p.startswith(("controlplane/", "dataplane/broker/"))}


def test_sdk_dependencies_are_only_what_it_imports() -> None:
    """No platform package rides along with the SDK: each SDK dependency is imported by it."""
    providers = importlib.metadata.packages_distributions()
    imported = _third_party_imports(_sdk_files())
    provided = {_normalise(d) for name in imported for d in providers.get(name, [name])}
    assert _declared() <= provided


def test_platform_declares_every_third_party_package_it_imports() -> None:
    files = {
        path
        for folder in SHIPPED
        for path in (ROOT / folder).rglob("*.py")
        if str(path.relative_to(ROOT)) not in DEV_ONLY_FILES and "_gen" not in path.parts
    }
    assert _undeclared(_third_party_imports(files), _declared("platform")) == {}


def test_tests_benchmarks_and_tools_declare_what_they_import() -> None:
    files = {p for folder in ("tests", "bench") for p in (ROOT / folder).rglob("*.py")}
    files |= {ROOT / name for name in DEV_ONLY_FILES}
    imports = _third_party_imports(files)
    for local in _local_modules(ROOT / "bench"):
        imports.pop(local, None)
    assert _undeclared(imports, _declared("platform", "dev")) == {}


@pytest.mark.parametrize("extra", [None, "platform", "dev"])
def test_metadata_states_ranges_and_the_lock_states_exact_versions(extra: str | None) -> None:
    """Ranges in pyproject.toml; every locked distribution at one exact version."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    requirements = (
        project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    )
    locked = _locked()
    for requirement in requirements:
        if extra != "dev":
            assert "==" not in requirement, f"{requirement}: metadata states a range, not a pin"
        assert _names([requirement]) <= locked.keys(), (
            f"{requirement} is missing from constraints.txt"
        )


def _locked() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = [line for line in lines if line.strip() and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^\s]+", pin) for pin in pins), pins
    return dict((_normalise(pin.split("==")[0]), pin.split("==")[1]) for pin in pins)
