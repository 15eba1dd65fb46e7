"""The live identities the controller pushes, and the tokens they still admit.

A token is signed once and lives until it expires, but the tenant or the service account
it names may be deleted meanwhile, and a tenant's slug taken again by a new tenant. The
controller's push, at every tick, lists every live tenant with its immutable id
(``UpdateMetadataRequest.tenants`` with ``identities_listed``) and the ids of the service
accounts deleted lately (``revoked_accounts``: for longer than any token lives), so a
broker learns of a deletion within a tick. ``LiveIdentities`` binds each call's
principal to it:

- a role in a tenant counts only if the tenant is listed with the id the token names; a
  token whose every tenant role is so dropped (the tenant was deleted, or the slug now
  belongs to another tenant, or never was one) is refused, with one message for all of
  these, so the refusal says nothing about which tenants exist;
- a service account's token (``account_id``) is refused once its account is revoked.
  A denylist rather than the live accounts, so that an account's tokens work at once,
  before the next push.

Refusals raise ``InvalidToken`` (UNAUTHENTICATED). Without a push listing identities (a
broker no controller manages) tokens are taken as signed. Thread safety: event-loop only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.broker.auth.principal import Principal
from dataplane.broker.auth.verifier import InvalidToken
from dataplane.client.claims import NO_LIVE_ACCOUNT, NO_LIVE_TENANT

PushSource = Callable[[], "admin_pb2.UpdateMetadataRequest | None"]


@dataclass(frozen=True)
class LiveIdentities:
    """Live tenants (slug -> id) and revoked service accounts (ids), from one push."""

    tenants: Mapping[str, str]
    revoked_accounts: frozenset[str]

    @classmethod
    def of(cls, push: admin_pb2.UpdateMetadataRequest | None) -> LiveIdentities | None:
        """The identities ``push`` lists; None when it lists none (see the module)."""
        if push is None or not push.identities_listed:
            return None
        return cls(
            tenants={t.slug: t.id for t in push.tenants},
            revoked_accounts=frozenset(push.revoked_accounts),
        )

    def bind(self, principal: Principal) -> Principal:
        """``principal`` with only its live tenants' roles; ``InvalidToken`` when its
        account is revoked or it named tenants and none is live."""
        if principal.internal:
            return principal
        if principal.account_id in self.revoked_accounts:
            raise InvalidToken(NO_LIVE_ACCOUNT)
        bound = principal.only_in(self.tenants)
        if principal.roles and not bound.roles and not principal.platform_admin:
            raise InvalidToken(NO_LIVE_TENANT)
        return bound


class PushedIdentities:
    """``LiveIdentities`` of the controller's last accepted push, rebuilt only when a
    new push was accepted."""

    def __init__(self, pushed: PushSource) -> None:
        self._pushed = pushed
        self._push: object = None
        self._identities: LiveIdentities | None = None

    def __call__(self) -> LiveIdentities | None:
        push = self._pushed()
        if push is not self._push:
            self._push = push
            self._identities = LiveIdentities.of(push)
        return self._identities
