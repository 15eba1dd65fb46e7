"""The codec is the one home of the record format: the SDK reaches it without storage or
the broker, and the codec itself builds on nothing else of Meridian."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dataplane

DATAPLANE = Path(dataplane.__file__).parent


def _imported_modules(package: str) -> set[tuple[str, str]]:
    """``(file, module)`` for every import in every module of ``dataplane.<package>``."""
    found = set()
    for path in (DATAPLANE / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {(path.name, f"{node.module}.{alias.name}") for alias in node.names}
            elif isinstance(node, ast.Import):
                found |= {(path.name, alias.name) for alias in node.names}
    return found


def _within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


@pytest.mark.parametrize("package", ["client", "records"])
def test_the_sdk_and_the_codec_import_neither_storage_nor_the_broker(package: str) -> None:
    wrong = {
        (name, module)
        for name, module in _imported_modules(package)
        if _within(module, "dataplane.storage", "dataplane.broker")
    }
    assert not wrong


def test_the_codec_imports_nothing_else_of_meridian() -> None:
    ours = ("dataplane", "controlplane", "lanes", "databus", "mirror", "spark", "web")
    wrong = {
        (name, module)
        for name, module in _imported_modules("records")
        if _within(module, *ours) and not _within(module, "dataplane.records")
    }
    assert not wrong
