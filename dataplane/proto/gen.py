"""Generate the Python code of the data plane's protos into ``dataplane/_gen/``.

    python -m dataplane.proto.gen           regenerate
    python -m dataplane.proto.gen --check   exit 1 if the checked-in code is stale

The ``.proto`` files under ``dataplane/proto/`` are the source; ``dataplane/_gen/`` is an
artifact: never edit it by hand.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
OUT = PROTO_ROOT.parent / "_gen"
_IMPORT = re.compile(r"^from meridian\.v1 import", re.MULTILINE)
_PLUGIN = Path(sys.executable).parent / "protoc-gen-mypy"
_GRPC_PLUGIN = Path(sys.executable).parent / "protoc-gen-mypy_grpc"


def generate(out: Path) -> None:
    """Write the generated package (with ``__init__.py`` files) into ``out``."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--plugin=protoc-gen-mypy={_PLUGIN}",
        f"--plugin=protoc-gen-mypy_grpc={_GRPC_PLUGIN}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for path in out.rglob("*.py*"):
        path.write_text(_IMPORT.sub("from dataplane._gen.meridian.v1 import", path.read_text()))
    for folder in [out, *(p for p in out.rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()


def _same_tree(a: Path, b: Path) -> bool:
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and _kept(p))
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file() and _kept(p))
    if files_a != files_b:
        return False
    return all(filecmp.cmp(a / f, b / f, shallow=False) for f in files_a)


def _kept(path: Path) -> bool:
    return "__pycache__" not in path.parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if dataplane/_gen is stale")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "_gen"
        fresh.mkdir()
        generate(fresh)
        if args.check:
            if OUT.exists() and _same_tree(fresh, OUT):
                return 0
            print("dataplane/_gen is stale: run python -m dataplane.proto.gen", file=sys.stderr)
            return 1
        shutil.rmtree(OUT, ignore_errors=True)
        shutil.copytree(fresh, OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
