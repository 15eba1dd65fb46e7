"""Typed domain errors raised by services; ``core.api.errors`` maps them to HTTP in one
table. Each carries a stable machine-readable ``code`` and the offending values."""

from __future__ import annotations

import re
from typing import Any


class DomainError(Exception):
    code = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class InvalidRequest(DomainError):
    """The input breaks a rule; ``details`` maps field names to messages."""

    code = "invalid"


class NotFound(DomainError):
    code = "not_found"


class PermissionDenied(DomainError):
    code = "permission_denied"


class Conflict(DomainError):
    """The request conflicts with existing state (a name in use, a wrong status)."""

    code = "conflict"


class QuotaExceeded(Conflict):
    """Granting the request would take the tenant past one of its quotas."""

    code = "quota_exceeded"

    def __init__(self, quota: str, limit: int, requested: int, current: int) -> None:
        super().__init__(
            f"quota {quota} exceeded: {current} in use + {requested} requested > limit {limit}",
            quota=quota,
            limit=limit,
            requested=requested,
            current=current,
        )
        self.quota = quota


class Unimplemented(DomainError):
    """The operation exists in the API but this deployment cannot do it (yet)."""

    code = "not_implemented"


class Unavailable(DomainError):
    """A dependency (the IdP, a broker) did not answer; retrying later may work."""

    code = "unavailable"


# Network addresses in a text: gRPC's target forms (``ipv4:10.0.0.1:4101``,
# ``ipv6:[::1]:4101``, ``dns:///host:4101``), bracketed IPv6 with a port, and
# ``host:port`` whose host is a dotted IPv4 or starts with a letter (so a time such as
# ``12:30:45`` is left alone).
_ADDRESS = re.compile(
    r"\b(?:ipv4|ipv6|dns|unix|unix-abstract):[^\s,;\"')]*[^\s,;\"'):]"
    r"|\[[0-9A-Fa-f:.%]+\](?::\d{1,5})?"
    r"|\b(?:\d{1,3}(?:\.\d{1,3}){3}|[A-Za-z][\w-]*(?:\.[\w-]+)*):\d{1,5}\b"
)
ADDRESS_PLACEHOLDER = "<address>"


def scrub_addresses(text: str) -> str:
    """``text`` with every network address replaced by ``<address>``: texts a tenant
    reads (a mirror worker's error, a link's health or status reason) must not name
    the brokers of a region (only the controllers know them)."""
    return _ADDRESS.sub(ADDRESS_PLACEHOLDER, text)
