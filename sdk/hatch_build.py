"""Where the SDK's modules are taken from when its wheel is built: the repository's tree
(``../dataplane``) when built from a checkout, or the ``dataplane/`` an sdist carries
(``[tool.hatch.build.targets.sdist.force-include]`` put it there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# The SDK's modules, relative to the repository's root: the SDK, the CLI, the generated
# protocol code, the lanes library and what they import (tests/test_packaging.py checks this list).
SDK_MODULES = (
    "dataplane/__init__.py",
    "dataplane/errors.py",
    "dataplane/delays.py",
    "dataplane/hashing.py",
    "dataplane/_gen",
    "dataplane/cli",
    "dataplane/client",
    "dataplane/records",
    "lanes",
)


class SdkModules(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":  # the tree is on sys.path (dev-mode-dirs): copy nothing
            return
        here = Path(self.root)
        tree = here if (here / "dataplane").is_dir() else here.parent
        for module in SDK_MODULES:
            build_data["force_include"][str(tree / module)] = module
