"""The Spark session of the job tests (the same as ``tests/spark/conftest.py``'s: one per
pytest process, warmed once, never stopped by a test)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.spark.jobs.support import Source, build_source

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from spark.session import local_session

    session = local_session("meridian-tests")
    session.range(1).count()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    """A tiered topic in a store, shared by the tests that only read it."""
    return build_source(tmp_path_factory.mktemp("source"))
