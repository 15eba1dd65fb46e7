"""The object store on a local folder: what it writes is its user's alone, whatever the
umask, since the objects are tenants' records."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane.tiered.store import ObjectStore


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_objects_and_their_folders_are_private_even_with_umask_000(
    tmp_path: Path, open_umask: None
) -> None:
    store = ObjectStore.open(str(tmp_path / "objects" / "east"))
    data = b"tenant records"
    store.put_stream("acme.orders/0/segments/0.log", io.BytesIO(data), len(data))
    store.put_bytes("acme.orders/0/manifest/latest", b"{}")
    assert store.create("acme.orders/0/manifest/00000001.json", b"{}")
    paths = list((tmp_path / "objects").rglob("*"))
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_file()}
    folders = {p.name: stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_dir()}
    assert len(files) == 3, files
    assert set(files.values()) == {0o600}, files
    assert set(folders.values()) == {0o700}, folders
    assert stat.S_IMODE((tmp_path / "objects").stat().st_mode) == 0o700
    assert store.get("acme.orders/0/segments/0.log") == data
