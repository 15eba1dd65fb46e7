"""Packaging: the SDK is its own distribution, and every package the code imports is declared.

``pip install meridian`` is the SDK (``dataplane.client``), the ``meridian`` CLI and the
generated protocol code (``sdk/pyproject.toml``; ``[fast]`` adds the compiled codec);
``meridian-platform`` (``pyproject.toml``) is what brokers and the control plane need, and
depends on the SDK; its ``[dev]`` extra is what tests, benchmarks and the protocol generator
need. These tests read the imports with ``ast`` (nothing is imported) and check them against
the two ``pyproject.toml`` files, and check that the two distributions share out the
``dataplane`` package between them; ``test_sdk_install.py`` builds the SDK's wheel and
installs it into a fresh venv.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SDK_ROOTS = ("dataplane/client", "dataplane/cli", "dataplane/_gen")
SHIPPED = ("dataplane", "controlplane", "lanes", "databus", "mirror", "spark", "web")
# The protocol generator is a developer's command (./dev proto), run from the dev install.
DEV_ONLY_FILES = ("dataplane/proto/gen.py",)
SDK = "meridian"  # the SDK's distribution
PLATFORM_ONLY = {"django", "celery", "rest_framework", "psycopg", "keycloak", "prometheus_client"}


def _pyproject(folder: str = ".") -> dict[str, Any]:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())


def _requirements(part: str) -> list[str]:
    """``sdk``: the SDK distribution's; ``platform``: the platform distribution's, but its
    SDK; ``dev``: the platform's ``dev`` extra."""
    if part == "sdk":
        return list(_pyproject("sdk")["project"]["dependencies"])
    if part == "platform":
        return [r for r in _pyproject()["project"]["dependencies"] if _names([r]) != {SDK}]
    return list(_pyproject()["project"]["optional-dependencies"][part])


def _names(requirements: Iterable[str]) -> set[str]:
    """Normalised distribution names of requirement strings (PEP 503)."""
    return {_normalise(re.split(r"[\[<>=!~;\s]", req, maxsplit=1)[0]) for req in requirements}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(*parts: str) -> set[str]:
    return {name for part in parts for name in _names(_requirements(part))}


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
    # optional import (the Python loops run without it), declared by the SDK's extra
    # `fast` only (test_the_compiled_codec_is_the_sdks_fast_extra).
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
    undeclared = _undeclared(_third_party_imports(_sdk_files()), _declared("sdk"))
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
    assert _declared("sdk") <= provided


def test_platform_declares_every_third_party_package_it_imports() -> None:
    files = {
        path
        for folder in SHIPPED
        for path in (ROOT / folder).rglob("*.py")
        if str(path.relative_to(ROOT)) not in DEV_ONLY_FILES and "_gen" not in path.parts
    }
    assert _undeclared(_third_party_imports(files), _declared("sdk", "platform")) == {}


def test_tests_benchmarks_and_tools_declare_what_they_import() -> None:
    files = {p for folder in ("tests", "bench") for p in (ROOT / folder).rglob("*.py")}
    files |= {ROOT / name for name in DEV_ONLY_FILES}
    imports = _third_party_imports(files)
    for local in _local_modules(ROOT / "bench"):
        imports.pop(local, None)
    assert _undeclared(imports, _declared("sdk", "platform", "dev")) == {}


@pytest.mark.parametrize("part", ["sdk", "platform", "dev"])
def test_metadata_states_ranges_and_the_lock_states_exact_versions(part: str) -> None:
    """Ranges in the metadata; every locked distribution at one exact version."""
    locked = _locked()
    for requirement in _requirements(part):
        if part != "dev":
            assert "==" not in requirement, f"{requirement}: metadata states a range, not a pin"
        assert _names([requirement]) <= locked.keys(), (
            f"{requirement} is missing from constraints.txt"
        )


def test_the_platform_depends_on_the_sdk_of_its_version() -> None:
    platform, sdk = _pyproject()["project"], _pyproject("sdk")["project"]
    assert platform["version"] == sdk["version"]
    assert f"{SDK}=={sdk['version']}" in platform["dependencies"]
    assert "meridian" not in platform.get("scripts", {}), "the CLI is the SDK's"
    assert sdk["scripts"] == {"meridian": "dataplane.cli:main"}


def test_the_compiled_codec_is_the_sdks_fast_extra() -> None:
    codec = tomllib.loads((ROOT / "native" / "pyproject.toml").read_text())["project"]
    sdk = _pyproject("sdk")["project"]
    assert sdk["optional-dependencies"]["fast"] == [f"{codec['name']}=={codec['version']}"]


def _sdk_shipped() -> set[str]:
    """The paths (relative to the root) the SDK's wheel takes from the tree: the
    ``SDK_MODULES`` of its build hook, which its sdist carries too."""
    hook = ast.parse((ROOT / "sdk" / "hatch_build.py").read_text())
    (modules,) = (
        ast.literal_eval(node.value)
        for node in hook.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "SDK_MODULES"
    )
    sdist = _pyproject("sdk")["tool"]["hatch"]["build"]["targets"]["sdist"]["force-include"]
    assert sdist == {f"../{module}": module for module in modules}
    return set(modules)


def _covered(path: str, shipped: set[str]) -> bool:
    return any(path == item or path.startswith(item + "/") for item in shipped)


def test_the_sdk_wheel_ships_exactly_what_the_sdk_imports() -> None:
    shipped = _sdk_shipped()
    needed = {path.relative_to(ROOT).as_posix() for path in _sdk_files()}
    assert {path for path in needed if not _covered(path, shipped)} == set()
    for item in shipped:  # and nothing it does not need
        assert any(_covered(path, {item}) for path in needed), item
    assert not {i for i in shipped if i.startswith(("controlplane", "dataplane/broker"))}
    assert not {i for i in shipped if i.startswith("dataplane/storage")}


def test_the_two_distributions_share_out_the_dataplane_package() -> None:
    """The platform's wheel leaves out exactly the SDK's modules, so the two never install
    the same file (and uninstalling one never removes the other's)."""
    wheel = _pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert {item.removeprefix("/") for item in wheel["exclude"]} == _sdk_shipped()
    assert set(wheel["packages"]) == set(SHIPPED)


def _locked() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = [line for line in lines if line.strip() and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^\s]+", pin) for pin in pins), pins
    return dict((_normalise(pin.split("==")[0]), pin.split("==")[1]) for pin in pins)
