"""Where request bodies enter the API: JSON with a bounded nesting depth.

Python's decoder recurses once per level of nesting, so a body of 50,000 ``[`` exhausts
the interpreter's stack (a ``RecursionError``, a 500) long before any serializer sees
it. Bodies are bounded in size by Django (``DATA_UPLOAD_MAX_MEMORY_SIZE``: DRF reads
them through ``request.body``) and here in depth, checked without recursion before the
decoder runs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.utils import json

# Far deeper than any body of this API (an ACL's operations list is three levels).
MAX_JSON_DEPTH = 64
# A JSON string (skipped whole: brackets inside it do not nest) or one bracket.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text`` nests arrays and objects deeper than ``limit``. Linear, without
    recursion; on text that is not JSON the answer may be wrong either way, which the
    decoder then refuses."""
    if text.count("[") + text.count("{") <= limit:
        return False  # too few brackets to nest that deep: the common case, at C speed
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, refusing a body nested deeper than ``MAX_JSON_DEPTH`` with
    ``ParseError`` (400, ``malformed``) before decoding it."""

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            text = stream.read().decode(encoding)
        except LookupError as exc:  # a charset Python lacks, or not a text codec
            raise ParseError(f"unsupported charset {encoding!r}") from exc
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - not {encoding}: {exc}") from exc
        if json_depth_exceeds(text):
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")
        parse_constant = json.strict_constant if self.strict else None
        try:
            return json.loads(text, parse_constant=parse_constant)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
