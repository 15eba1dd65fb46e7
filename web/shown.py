"""Record bytes as the message browser shows them: pretty JSON when they parse, UTF-8
text when they decode, hex otherwise (or the view the reader forces), cut to a cap.

What comes out is plain text for the template, which escapes it (autoescape): a value
holding HTML or script is shown, never run. Control characters other than newline and
tab are written as ``\\xNN`` so they can neither hide text nor upset the page.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

VALUE_CAP = 4096  # characters shown of a value (bytes, in hex view)
KEY_CAP = 512
HEADER_CAP = 512
VIEWS = ("auto", "json", "text", "hex")

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class Shown:
    text: str
    kind: str  # json | text | hex | null
    size: int  # bytes of the original
    truncated: bool

    @property
    def note(self) -> str:
        """What a truncated value's display holds, e.g. "first 4 KiB of 10000 bytes"."""
        if not self.truncated:
            return ""
        shown = "bytes" if self.kind == "hex" else "characters"
        return f"truncated: first {VALUE_CAP // 1024} KiB ({shown}) of {self.size} bytes shown"


def visible(text: str) -> str:
    """Control and bidirectional-override characters written as escapes."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def show(data: bytes | None, view: str = "auto", cap: int = VALUE_CAP) -> Shown:
    """``data`` for display in ``view`` (see the module docstring)."""
    if data is None:
        return Shown("null", "null", 0, False)
    if view in ("auto", "json"):
        pretty = _json(data)
        if pretty is not None:
            return _cut(visible(pretty), "json", len(data), cap)
    if view in ("auto", "json", "text"):
        text = _utf8(data, strict=view != "text")
        if text is not None:
            return _cut(visible(text), "text", len(data), cap)
    shown = data[:cap]
    return Shown(shown.hex(" "), "hex", len(data), len(data) > cap)


def _cut(text: str, kind: str, size: int, cap: int) -> Shown:
    return Shown(text[:cap], kind, size, len(text) > cap)


def _utf8(data: bytes, *, strict: bool) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None if strict else data.decode("utf-8", errors="replace")


def _json(data: bytes) -> str | None:
    """Pretty JSON of an object or array (a bare number or string reads better as text)."""
    stripped = data.lstrip()
    if stripped[:1] not in (b"{", b"["):
        return None
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return json.dumps(parsed, indent=2, ensure_ascii=False)
