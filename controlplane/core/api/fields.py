"""Serializer fields that take JSON values of their own type only: DRF's ``IntegerField``
takes ``"5"`` and ``5.0`` and its ``CharField`` takes ``5``, which a machine's report
(an agent's heartbeat) should never send."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (not a boolean, a string or a float)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A JSON string (not a number)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)
