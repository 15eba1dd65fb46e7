"""A cluster's object store for tiered storage: the rules for its URI and options, and
how the options (a secret: credentials) are kept out of every answer and record.

The brokers open the store with fsspec (``dataplane.tiered``): the URI is a folder path
or ``<scheme>://...`` of a filesystem fsspec knows, and the options are that filesystem's
keyword arguments, e.g. ``{"key": ..., "secret": ..., "client_kwargs":
{"endpoint_url": ...}}`` for S3. The control plane hands the options to the brokers it
starts in a private file (``--remote-store-options-file``), never on a command line."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError

from dataplane.tiered.store import ObjectStore

if TYPE_CHECKING:
    from controlplane.regions.models import Cluster

REMOTE_STORE_SCHEMES = ("file", "s3", "gs", "hdfs", "memory")
MAX_OPTIONS_BYTES = 16 * 1024  # as JSON
MAX_OPTIONS_DEPTH = 4  # {"client_kwargs": {"config": {...}}} and no deeper


def remote_store_uri_validator(uri: str) -> None:
    """An absolute folder path or a URI of one of ``REMOTE_STORE_SCHEMES``; blank is
    allowed (tiering off)."""
    if not uri or uri.startswith("/"):
        return
    scheme = urlsplit(uri).scheme
    if scheme not in REMOTE_STORE_SCHEMES or not uri[len(scheme) + 3 :]:
        raise ValidationError(
            f"an absolute folder path or a URI of {', '.join(REMOTE_STORE_SCHEMES)} "
            "(e.g. s3://bucket/prefix)"
        )
    if not uri.startswith(f"{scheme}://"):
        raise ValidationError(f"{scheme}: URIs are written {scheme}://...")


def remote_store_options_validator(options: Any) -> None:
    """A JSON object of at most ``MAX_OPTIONS_BYTES`` and ``MAX_OPTIONS_DEPTH`` levels."""
    if not isinstance(options, dict):
        raise ValidationError("a JSON object of the store's options")
    if len(json.dumps(options)) > MAX_OPTIONS_BYTES:
        raise ValidationError(f"at most {MAX_OPTIONS_BYTES} bytes as JSON")
    if _depth(options) > MAX_OPTIONS_DEPTH:
        raise ValidationError(f"at most {MAX_OPTIONS_DEPTH} levels of nesting")


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def open_store(cluster: Cluster) -> ObjectStore:
    """The cluster's object store as the brokers see it (``ValueError`` without one).
    Opening is local; the first call on it may raise ``RemoteStoreError``."""
    return ObjectStore.open(cluster.remote_store_uri, dict(cluster.remote_store_options))
