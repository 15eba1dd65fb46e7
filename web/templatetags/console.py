"""Template helpers of the console's forms."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def value_of(form: Any, name: str) -> str:
    """What the user typed in field ``name`` (or its current value), '' if nothing."""
    return str(form.values.get(name, ""))


@register.filter
def errors_of(form: Any, name: str) -> list[str]:
    return list(form.errors.get(name, []))
