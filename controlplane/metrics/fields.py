"""``PointsField``: an array of float-or-null points, native on Postgres (``float8[]``,
which the bulk statements of ``store`` update in place) and JSON text on SQLite (the
embedded demo's database, where ``store`` takes its row-by-row path)."""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper


class PointsField(models.Field):  # type: ignore[type-arg]
    description = "points (float or null)"

    def db_type(self, connection: BaseDatabaseWrapper) -> str:
        return "double precision[]" if connection.vendor == "postgresql" else "text"

    def get_db_prep_value(
        self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False
    ) -> Any:
        if value is None:
            return None
        return list(value) if connection.vendor == "postgresql" else json.dumps(list(value))

    def from_db_value(
        self, value: Any, expression: Any, connection: BaseDatabaseWrapper
    ) -> list[float | None] | None:
        if value is None or isinstance(value, list):
            return value
        points: list[float | None] = json.loads(value)
        return points
