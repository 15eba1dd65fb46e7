"""Authorization: may the caller (``principal.current()``) do this to that name?

Topics and consumer groups are tenant-scoped by name (DESIGN decision 9): ``<tenant>.``
starts every client topic and, when authentication is on, every group id. A decision
depends only on the name, the token and the topic's ACL entries — never on whether the
topic or group exists — so a refusal tells another tenant nothing.

- Internal names (``__…``) and names without a tenant prefix: refused to every client,
  but for a tenant's timer log ``__delay.<tenant>`` (``dataplane.delays``), which counts
  as the tenant's: a role that may produce may produce to it (each record is then
  checked against the topic it is for: ``dataplane.broker.delay``), one that may
  describe may describe it, and nobody consumes from it.
- Roles in the name's tenant (the control plane's): ``tenant-admin`` may produce,
  consume and administer; ``developer`` may produce and consume; ``viewer`` may consume.
- ACLs (the controller's push, ``MetadataTopic.acls``): when a topic has entries, a
  caller other than a tenant-admin gets only the operations of the entries naming its
  client id (``azp``) or subject — within what its role allows. No entry: none. A lane
  topic ``T~L`` is decided by the entries of its trunk topic ``T`` (its own are ignored).
- Transactional ids and producer groups (half messages) are ``<tenant>.<id>`` too:
  using one (a transaction, a half message, its check-backs) needs a role that may
  produce in the tenant, describing one any role, aborting another producer's
  transaction ``tenant-admin``; so one tenant's producers can never fence another's.
- Describing (Metadata, DescribeGroups, ListGroups) needs any role in the tenant; a
  platform admin may describe every tenant's topics and groups, and nothing more.
- Internal calls (Admin, Replication, peer Metadata) need the internal role; the
  internal role needs nothing else (brokers and the controller act for every tenant).

With authentication off (``ALLOW_ALL``) everything is allowed. With it on, a call that
somehow runs without a principal is treated as a caller holding no role: refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dataplane.broker.auth.principal import Principal, current
from dataplane.client.claims import DEVELOPER, TENANT_ADMIN, VIEWER
from dataplane.delays import is_timer_topic, tenant_of_timer
from dataplane.errors import ErrorCode, MeridianError
from lanes.names import split_topic

PRODUCE, CONSUME, ADMIN, DESCRIBE = "produce", "consume", "admin", "describe"
ROLE_OPERATIONS = {
    TENANT_ADMIN: frozenset({PRODUCE, CONSUME, ADMIN, DESCRIBE}),
    DEVELOPER: frozenset({PRODUCE, CONSUME, DESCRIBE}),
    VIEWER: frozenset({CONSUME, DESCRIBE}),
}
_VERBS = {PRODUCE: "produce to", CONSUME: "consume from", ADMIN: "administer", DESCRIBE: "describe"}
_GROUP_VERBS = {CONSUME: "use", ADMIN: "delete", DESCRIBE: "describe"}
_TXN_VERBS = {PRODUCE: "use", ADMIN: "abort the transaction of", DESCRIBE: "describe"}

AclLookup = Callable[[str], Sequence[Any]]  # topic -> its AclEntry list (may be empty)


def tenant_of(name: str) -> str | None:
    """The tenant a topic or group name belongs to; None for internal or unscoped names
    (a timer log is its tenant's)."""
    if name.startswith("__"):
        return tenant_of_timer(name) if is_timer_topic(name) else None
    tenant, dot, rest = name.partition(".")
    return tenant if dot and tenant and rest else None


_NOBODY = Principal(subject="")


class Authorizer:
    """See the module docstring. ``acls(topic)`` returns the topic's pushed ACL entries;
    ``enabled=False`` allows everything (authentication is off)."""

    def __init__(self, acls: AclLookup | None = None, *, enabled: bool = True) -> None:
        self._acls = acls or (lambda topic: ())
        self.enabled = enabled

    def _caller(self) -> Principal | None:
        """The caller to check; None when every call is allowed."""
        if not self.enabled:
            return None
        principal = current() or _NOBODY
        return None if principal.internal else principal

    def restricts_caller(self) -> bool:
        """Whether the call being served is checked at all (False: authentication is off,
        or the caller holds the internal role)."""
        return self._caller() is not None

    # -- topics -------------------------------------------------------------------------
    def topic_error(self, topic: str, operation: str) -> MeridianError | None:
        """None when the caller may do ``operation`` on ``topic``; else the refusal."""
        principal = self._caller()
        if principal is None:
            return None
        if self._topic_allowed(principal, topic, operation):
            return None
        return MeridianError(
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            f"not authorized to {_VERBS[operation]} topic {topic!r}",
        )

    def may_describe_topic(self, topic: str) -> bool:
        return self.topic_error(topic, DESCRIBE) is None

    def _topic_allowed(self, principal: Principal, topic: str, operation: str) -> bool:
        tenant = tenant_of(topic)
        if tenant is None:
            return False
        if operation == DESCRIBE and principal.platform_admin:
            return True
        role = principal.role_in(tenant)
        if role is None or operation not in ROLE_OPERATIONS[role]:
            return False
        if is_timer_topic(topic):  # its records' own topics' ACLs decide, record by record
            return operation in (PRODUCE, DESCRIBE)
        if role == TENANT_ADMIN or operation == DESCRIBE:
            return True
        # A lane topic is authorized exactly as its trunk topic: T~L has T's entries.
        entries = self._acls(split_topic(topic)[0])
        if not entries:
            return True
        names = principal.names
        return any(e.principal in names and operation in e.operations for e in entries)

    # -- groups -------------------------------------------------------------------------
    def group_error(self, group_id: str, operation: str) -> MeridianError | None:
        """None when the caller may do ``operation`` on group ``group_id``."""
        if self._may_by_name(group_id, operation):
            return None
        return MeridianError(
            ErrorCode.GROUP_AUTHORIZATION_FAILED,
            f"not authorized to {_GROUP_VERBS.get(operation, operation)} group {group_id!r}"
            " (group ids start with '<tenant>.')",
        )

    def _may_by_name(self, name: str, operation: str) -> bool:
        """Whether the caller may do ``operation`` on a tenant-scoped name (a group, a
        transactional id): its role in the tenant the name's prefix names, or a platform
        admin describing."""
        principal = self._caller()
        if principal is None:
            return True
        tenant = tenant_of(name)
        role = principal.role_in(tenant) if tenant is not None else None
        if role is not None and operation in ROLE_OPERATIONS[role]:
            return True
        return tenant is not None and operation == DESCRIBE and principal.platform_admin

    def may_describe_group(self, group_id: str) -> bool:
        return self.group_error(group_id, DESCRIBE) is None

    # -- transactional ids and producer groups ------------------------------------------
    def transactional_id_error(self, name: str, operation: str) -> MeridianError | None:
        """None when the caller may do ``operation`` (PRODUCE: use, DESCRIBE, ADMIN:
        abort) on transactional id or producer group ``name``; decided by its name
        alone, so the answer is the same whether it exists or not."""
        if self._may_by_name(name, operation):
            return None
        return MeridianError(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            f"not authorized to {_TXN_VERBS.get(operation, operation)} {name!r}"
            " (transactional ids and producer groups start with '<tenant>.')",
        )

    # -- the cluster --------------------------------------------------------------------
    def check_internal(self, what: str) -> None:
        """Raise CLUSTER_AUTHORIZATION_FAILED unless the caller holds the internal role."""
        if self._caller() is not None:
            raise MeridianError(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{what} is internal to the cluster"
            )

    def check_producer(self) -> None:
        """Raise CLUSTER_AUTHORIZATION_FAILED unless the caller may produce somewhere
        (a producer id is only useful to a producer)."""
        principal = self._caller()
        if principal is None:
            return
        if not any(PRODUCE in ROLE_OPERATIONS[role] for role in principal.roles.values()):
            raise MeridianError(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "producer ids are for callers that may produce to some topic",
            )


ALLOW_ALL = Authorizer(enabled=False)
