"""Fixtures for codec tests: the storage log's, for the tests that append what the codec
validates to a real log."""

from __future__ import annotations

from tests.dataplane.storage.conftest import clock, open_log

__all__ = ["clock", "open_log"]
