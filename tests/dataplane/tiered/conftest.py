"""Fixtures for tiered-storage tests: every test runs against a local folder and an S3
endpoint (moto; that variant is marked ``processes``, since it starts the server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dataplane.tiered.store import ObjectStore


@pytest.fixture(params=["folder", pytest.param("s3", marks=pytest.mark.processes)])
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """``(uri, options)`` of an empty store: a folder, or a fresh S3 bucket."""
    if request.param == "folder":
        return str(tmp_path / "store"), {}
    location: tuple[str, dict[str, Any]] = request.getfixturevalue("s3_store_uri")
    return location


@pytest.fixture
def store(store_location: tuple[str, dict[str, Any]]) -> ObjectStore:
    uri, options = store_location
    return ObjectStore.open(uri, options)
