"""The job tests' shared input (their Spark session is ``tests/spark/conftest.py``'s)."""

from __future__ import annotations

import pytest

from tests.spark.jobs.support import Source, build_source


@pytest.fixture(scope="session")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    """A tiered topic in a store, shared by the tests that only read it."""
    return build_source(tmp_path_factory.mktemp("source"))
