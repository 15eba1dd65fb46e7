"""Forms of the console: what the user typed goes through the API's own serializers
(types) and services (rules, quotas), so a page refuses exactly what the API refuses,
with the API's messages, named by field.

A form is rendered from ``FormState``: the values as typed (kept on error: nothing is
lost) and the messages per field; messages that name no field of the form are shown
above it (``non_field``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from controlplane.core.errors import Conflict, InvalidRequest

T = TypeVar("T")

NON_FIELD = "non_field"


@dataclass
class FormState:
    """``fields``: the names the form renders; ``values``: what was typed (non-empty)."""

    fields: tuple[str, ...]
    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_post(cls, post: Mapping[str, str], fields: Iterable[str]) -> FormState:
        names = tuple(fields)
        return cls(fields=names, values=typed_values(post, names))

    @property
    def non_field(self) -> list[str]:
        return self.errors.get(NON_FIELD, [])

    @property
    def ok(self) -> bool:
        return not self.errors


def typed_confirmation(post: Mapping[str, str], expected: str, refusal: str) -> FormState:
    """The ``confirm`` field of a destructive form: ``ok`` when it holds exactly
    ``expected``, else carrying ``refusal`` under the field and what was typed."""
    typed = post.get("confirm", "").strip()
    state = FormState(fields=("confirm",), values={"confirm": typed})
    if typed != expected:
        state.errors = {"confirm": [refusal]}
    return state


def typed_values(post: Mapping[str, str], fields: Iterable[str]) -> dict[str, str]:
    """The form's fields as typed (stripped); empty ones are left out, so the API's
    defaults (or the current value) apply."""
    values = {name: str(post.get(name, "")).strip() for name in fields}
    return {name: value for name, value in values.items() if value}


def submit(
    serializer_class: type[serializers.Serializer[Any]],
    state: FormState,
    call: Callable[[dict[str, Any]], T],
    *,
    partial: bool = False,
    data: Mapping[str, Any] | None = None,
) -> T | None:
    """Validate ``state.values`` (or ``data``, where the input is not only strings:
    a list of checkboxes) with the API's serializer and hand the result to ``call`` (a
    service). Returns its result, or None with ``state.errors`` filled."""
    serializer = serializer_class(data=state.values if data is None else data, partial=partial)
    if not serializer.is_valid():
        state.errors = _messages(serializer.errors, state.fields)
        return None
    try:
        return call(dict(serializer.validated_data))
    except (InvalidRequest, Conflict) as exc:
        state.errors = _domain_messages(exc.message, exc.details, state.fields)
    except DjangoValidationError as exc:
        state.errors = _messages(exc.message_dict, state.fields)
    return None


def on_field(name: str, call: Callable[[dict[str, Any]], T]) -> Callable[[dict[str, Any]], T]:
    """``call``, with a ``Conflict`` that names field ``name`` (``name=<value>`` in its
    details, as the accounts services raise a name in use) shown under that field."""

    def wrapped(data: dict[str, Any]) -> T:
        try:
            return call(data)
        except Conflict as exc:
            if isinstance(exc.details.get(name), str):
                raise Conflict(exc.message, **{name: [exc.message]}) from exc
            raise

    return wrapped


def _messages(errors: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, list[str]]:
    """Messages per field; those of a field the form does not show go above it, named."""
    out: dict[str, list[str]] = {}
    for name, messages in errors.items():
        texts = [str(m) for m in _as_list(messages)]
        if name in fields:
            out.setdefault(name, []).extend(texts)
        elif name in ("non_field_errors", "__all__"):
            out.setdefault(NON_FIELD, []).extend(texts)
        else:
            out.setdefault(NON_FIELD, []).extend(f"{name}: {text}" for text in texts)
    return out


def _domain_messages(
    message: str, details: Mapping[str, Any], fields: tuple[str, ...]
) -> dict[str, list[str]]:
    """A service's typed error: its per-field messages (``details`` entries that are
    lists of strings) on their fields, else its whole message above the form."""
    per_field = {
        name: value
        for name, value in details.items()
        if isinstance(value, list) and all(isinstance(m, str) for m in value)
    }
    return _messages(per_field, fields) if per_field else {NON_FIELD: [message]}


def _as_list(messages: Any) -> list[Any]:
    if isinstance(messages, list | tuple):
        return list(messages)
    if isinstance(messages, dict):  # a list field's messages per item index
        return [message for value in messages.values() for message in _as_list(value)]
    return [messages]
