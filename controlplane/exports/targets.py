"""Where exports may write: the rules for an export's ``target_uri``.

The platform allows prefixes (``settings.EXPORT_ALLOWED_URIS``; ``{tenant}`` in one
stands for the tenant's slug), by default one local folder per tenant under the
platform's data directory (``<DATA_DIR>/exports/<tenant>/``). A target is an absolute
folder path, ``file:///...`` (stored as the path) or ``<scheme>://...``; it is refused
(``TargetNotAllowed``, naming why) when it is relative, holds a ``.`` or ``..`` part or
an empty one, is ``http(s)://`` (a web server is no file store), or lies outside every
allowed prefix. Two exports whose targets are the same folder or one inside the other
overlap: their files and manifests would mix (``services`` refuses that).

``settings.EXPORT_TARGET_OPTIONS`` maps an allowed prefix to the filesystem options the
jobs open targets under it with (an S3 endpoint and credentials), so callers never
handle store credentials."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from controlplane.core.errors import InvalidRequest

MAX_TARGET_CHARS = 1024
REFUSED_SCHEMES = ("http", "https", "ftp")


class TargetNotAllowed(InvalidRequest):
    """The target URI is malformed or outside what the platform allows."""

    code = "target_not_allowed"

    def __init__(self, uri: str, why: str) -> None:
        super().__init__(f"target_uri: {why}", target_uri=[why])
        self.uri = uri


def allowed_prefixes(tenant_slug: str) -> list[str]:
    """The normalized prefixes ``tenant_slug``'s exports may write under."""
    prefixes = []
    for raw in settings.EXPORT_ALLOWED_URIS:
        text = str(raw).replace("{tenant}", tenant_slug)
        if not (text.startswith("/") or "://" in text):
            text = str(Path(text).resolve())  # a relative setting: from the working directory
        prefixes.append(_normalized(text))
    return prefixes


def checked_target(uri: Any, tenant_slug: str) -> str:
    """``uri`` normalized (``file:///x`` as ``/x``, no trailing ``/``) if the platform
    allows ``tenant_slug`` to export there; ``TargetNotAllowed`` otherwise."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_TARGET_CHARS:
        raise TargetNotAllowed(str(uri), f"a URI of 1 to {MAX_TARGET_CHARS} characters")
    target = _checked_form(uri)
    prefixes = allowed_prefixes(tenant_slug)
    if not any(is_within(target, prefix) for prefix in prefixes):
        raise TargetNotAllowed(uri, f"outside what the platform allows: {', '.join(prefixes)}")
    return target


def _checked_form(uri: str) -> str:
    scheme = urlsplit(uri).scheme.lower() if "://" in uri else ""
    if scheme in REFUSED_SCHEMES:
        raise TargetNotAllowed(uri, f"{scheme}:// is not a file store")
    if scheme == "file":
        if not uri.startswith("file:///"):
            raise TargetNotAllowed(uri, "file URIs are file:///absolute/path")
        uri = uri[len("file://") :]
    elif not scheme and not uri.startswith("/"):
        raise TargetNotAllowed(uri, "a relative path: give an absolute folder path or a URI")
    if any(ord(c) < 0x20 or c in "\\?#" for c in uri):
        raise TargetNotAllowed(uri, "control characters, '\\', '?' and '#' are not allowed")
    rest = uri.split("://", 1)[1] if scheme and scheme != "file" else uri.lstrip("/")
    parts = rest.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise TargetNotAllowed(uri, "'.', '..' and empty parts are not allowed in the path")
    return _normalized(uri)


def _normalized(uri: str) -> str:
    if uri.startswith("file:///"):
        uri = uri[len("file://") :]
    return uri.rstrip("/") or "/"


def is_within(target: str, prefix: str) -> bool:
    """Whether ``target`` is ``prefix`` or a folder inside it."""
    return target == prefix or target.startswith(prefix.rstrip("/") + "/")


def overlaps(a: str, b: str) -> bool:
    """Whether two targets share files: the same folder, or one inside the other."""
    return is_within(a, b) or is_within(b, a)


def target_options(target: str, tenant_slug: str) -> dict[str, Any]:
    """The filesystem options of the longest configured prefix holding ``target``."""
    best: tuple[int, dict[str, Any]] = (-1, {})
    for raw, options in settings.EXPORT_TARGET_OPTIONS.items():
        prefix = _normalized(str(raw).replace("{tenant}", tenant_slug))
        if is_within(target, prefix) and len(prefix) > best[0]:
            best = (len(prefix), dict(options))
    return best[1]
