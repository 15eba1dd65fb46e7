"""Lanes on the broker: the declared lanes, how a lane topic is answered, the demands
and activity reported to the controller.

Declared lanes (``LaneTable``): the ``lanes`` of the controller's last accepted push
(``UpdateMetadataRequest``, see ``cluster.ControllerMetadata``) as ``lanes.LaneSpec``,
keyed by (tenant, lane). ``listed`` is the push's ``lanes_listed``. Without it (no push,
or a broker no controller manages) no lane is declared: lane topics that exist serve as
plain topics and a missing one is LANE_NOT_FOUND. A declaration that breaks the lane
rules (name, orphan policy) is logged and left out; it never fails the push.

A lane topic ``T~L`` of tenant ``t`` (``lanes.names.split_topic``), for Produce and
Metadata (``BrokerLanes``):

- not known to the cluster (``missing``): L declared by ``t``, covering T, and T exists
  -> LANE_TOPIC_PENDING (retriable) and ``T~L`` becomes a *demand*; otherwise
  LANE_NOT_FOUND (fatal), the message saying which: the lane is not declared, it does
  not cover T, or T does not exist;
- known, produce (``produce_refusal``): with ``listed``, LANE_NOT_FOUND when L is no
  longer declared by ``t`` or no longer covers T (the records are refused; nothing of
  the trunk is touched); without ``listed`` it is a plain topic;
- hosted here, produce, with ``listed``, but not named by the push (the controller is
  deleting it, or created it and has not pushed it yet): LANE_TOPIC_PENDING without a
  demand, so no record is acknowledged into a log about to be deleted;
- its metadata carries ``trunk`` and the lane's ``consume_trunk`` (``lane_fields``);
  the metadata of a trunk topic T lists its existing lane topics whose lane is declared
  and ``orphaned_to_trunk(T)`` (``orphaned``).

Demands: at most ``max_demands`` names (beyond that the oldest is forgotten; a producer
that still wants it asks again), reported in every ``UpdateMetadataResponse`` until a
push lists the topic (then dropped).

Activity (``BrokerLanes.appended`` / ``fetched``): per lane topic, the wall-clock ms of
the last append and of the last consumer fetch since this broker started — one dict
write per Produce or Fetch of a lane topic with a partition led here (a name hosted
nowhere is not recorded), nothing per record. Reported for the lane topics with a
partition led here; each report forgets the other topics' entries, so the table never
outgrows the lane topics led here.

Thread safety: the declared lanes are rebuilt from a push into a new immutable snapshot
that replaces the old one in a single reference assignment, so readers on any thread see
one push or the next, never a mix. Demands are guarded by a lock; activity is two dicts
whose entries are replaced whole (one atomic store each under the GIL), pruned by a
report into new dicts (a time written during the prune may be lost: it is only
activity, written again at the next Produce or Fetch).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.errors import ErrorCode, MeridianError
from lanes.model import LaneSpec, OrphanPolicy
from lanes.names import InvalidLaneNameError, split_topic

log = logging.getLogger(__name__)

MAX_DEMANDS = 1024

PushSource = Callable[[], admin_pb2.UpdateMetadataRequest | None]
# (lane group id, the lane topics its members subscribe to)
LaneConsumersFn = Callable[[], Iterable[tuple[str, Iterable[str]]]]


def tenant_of_topic(topic: str) -> str:
    """The tenant slug a client topic name starts with (``acme.orders~ppe`` → ``acme``)."""
    return topic.partition(".")[0]


def spec_of(declaration: admin_pb2.LaneDeclaration) -> LaneSpec:
    """The ``LaneSpec`` of a pushed declaration; ``ValueError`` if it breaks the rules."""
    return LaneSpec(
        tenant=declaration.tenant,
        name=declaration.name,
        all_topics=declaration.all_topics,
        topics=frozenset(declaration.topics),
        consume_trunk=declaration.consume_trunk,
        orphan_policy=OrphanPolicy(declaration.orphan_policy or OrphanPolicy.TRUNK.value),
        live_topics=frozenset(declaration.live_topics),
        partitions=declaration.partitions,
    )


@dataclass(frozen=True)
class _Declared:
    """One push's lanes: immutable once built."""

    push: admin_pb2.UpdateMetadataRequest | None
    listed: bool = False
    specs: Mapping[tuple[str, str], LaneSpec] = field(default_factory=dict)
    pushed_topics: frozenset[str] = frozenset()


def _declared(push: admin_pb2.UpdateMetadataRequest | None) -> _Declared:
    if push is None:
        return _Declared(None)
    specs: dict[tuple[str, str], LaneSpec] = {}
    for declaration in push.lanes:
        try:
            spec = spec_of(declaration)
        except (InvalidLaneNameError, ValueError) as exc:
            log.warning("ignoring lane %r of %r: %s", declaration.name, declaration.tenant, exc)
            continue
        specs[(spec.tenant, spec.name)] = spec
    return _Declared(push, push.lanes_listed, specs, frozenset(t.name for t in push.topics))


class LaneTable:
    """The declared lanes of the last push (see the module docstring); ``push()``
    returns that push (or None), read again whenever it changes."""

    def __init__(self, push: PushSource) -> None:
        self._push = push
        self._declared = _Declared(None)

    def _current(self) -> _Declared:
        push = self._push()
        declared = self._declared
        if declared.push is not push:
            declared = self._declared = _declared(push)
        return declared

    @property
    def listed(self) -> bool:
        return self._current().listed

    def spec(self, tenant: str, lane: str) -> LaneSpec | None:
        return self._current().specs.get((tenant, lane))

    def spec_of_topic(self, topic: str) -> LaneSpec | None:
        """The declared lane of lane topic ``topic`` (None: a trunk topic, or undeclared)."""
        trunk, lane = split_topic(topic)
        return None if lane is None else self.spec(tenant_of_topic(trunk), lane)

    def pushed_topics(self) -> frozenset[str]:
        """The topics the last push names."""
        return self._current().pushed_topics

    def covers_any(self, trunk: str) -> bool:
        """Whether some declared lane covers trunk topic ``trunk``."""
        tenant = tenant_of_topic(trunk)
        return any(
            spec.covers(trunk) for (owner, _), spec in self._current().specs.items()
            if owner == tenant
        )  # fmt: skip


class BrokerLanes:
    """What the broker does about lanes (module docstring).

    ``table`` holds the declared lanes; ``known()`` returns the topics the cluster knows
    (a mapping or set of names: the cluster view's placement); ``consumers()`` the lane
    groups coordinated here with their subscribed lane topics; ``on_refused(code name)``
    and ``on_demands(count)`` feed the metrics.
    """

    def __init__(
        self,
        table: LaneTable,
        *,
        known: Callable[[], Iterable[str]] = lambda: (),
        consumers: LaneConsumersFn = lambda: (),
        on_refused: Callable[[str], None] | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        max_demands: int = MAX_DEMANDS,
    ) -> None:
        self.table = table
        self.known = known
        self.consumers = consumers
        self._on_refused = on_refused
        self._clock_ms = clock_ms
        self._max_demands = max_demands
        self._lock = threading.Lock()
        self._demands: dict[str, None] = {}  # insertion-ordered: the oldest first
        self._appended: dict[str, int] = {}
        self._fetched: dict[str, int] = {}

    # -- answers ------------------------------------------------------------------------
    def missing(self, topic: str, known: Any) -> MeridianError:
        """Why lane topic ``topic``, unknown to the cluster, cannot be used now; records
        the demand when it is LANE_TOPIC_PENDING. ``known`` supports ``in`` (topic names)."""
        trunk, lane = split_topic(topic)
        assert lane is not None, topic
        tenant = tenant_of_topic(trunk)
        spec = self.table.spec(tenant, lane)
        if spec is None:
            return _not_found(f"lane {lane!r} is not declared by tenant {tenant!r} ({topic!r})")
        if not spec.covers(trunk):
            return _not_found(f"lane {lane!r} of tenant {tenant!r} does not cover {trunk!r}")
        if trunk not in known:
            return _not_found(f"the trunk topic {trunk!r} of lane topic {topic!r} does not exist")
        self._demand(topic)
        return MeridianError(
            ErrorCode.LANE_TOPIC_PENDING,
            f"lane topic {topic!r} is being created on first use: retry shortly",
        )

    def produce_refusal(self, topic: str, *, hosted: bool) -> MeridianError | None:
        """Why a produce to lane topic ``topic`` is refused (None: go on); ``hosted``:
        a partition of it is hosted here (so the cluster knows it)."""
        known: Any = () if hosted else set(self.known())
        exists = hosted or topic in known
        error = self._undeclared(topic) if exists else self.missing(topic, known)
        if error is None and hosted:
            error = self._unlisted(topic)
        if error is not None and self._on_refused is not None:
            self._on_refused(error.code_name)
        return error

    def _undeclared(self, topic: str) -> MeridianError | None:
        if not self.table.listed:
            return None
        trunk, lane = split_topic(topic)
        tenant = tenant_of_topic(trunk)
        spec = self.table.spec(tenant, lane or "")
        if spec is None:
            return _not_found(f"lane {lane!r} is no longer declared by tenant {tenant!r}")
        if not spec.covers(trunk):
            return _not_found(f"lane {lane!r} of tenant {tenant!r} no longer covers {trunk!r}")
        return None

    def _unlisted(self, topic: str) -> MeridianError | None:
        """LANE_TOPIC_PENDING for a hosted lane topic the last push (``listed``) does not
        name: it is being deleted (its records would be lost with it) or is so new that
        the push naming it has not come yet. No demand: it still exists here; once its
        partitions are gone, a produce finds it missing and demands it again."""
        if not self.table.listed or topic in self.table.pushed_topics():
            return None
        return MeridianError(
            ErrorCode.LANE_TOPIC_PENDING,
            f"lane topic {topic!r} is being deleted or created by the controller: retry shortly",
        )

    def lane_fields(self, topic: str) -> tuple[str, bool]:
        """(trunk, consume_trunk) of lane topic ``topic`` for its metadata."""
        spec = self.table.spec_of_topic(topic)
        return split_topic(topic)[0], spec is not None and spec.consume_trunk

    def orphaned(self, trunk: str, lane_topics: Iterable[str]) -> list[str]:
        """Those of ``lane_topics`` (existing lane topics of ``trunk``) whose lane is
        declared and orphaned to the trunk now."""
        out = []
        for topic in lane_topics:
            spec = self.table.spec_of_topic(topic)
            if spec is not None and spec.orphaned_to_trunk(trunk):
                out.append(topic)
        return sorted(out)

    # -- demands ------------------------------------------------------------------------
    def _demand(self, topic: str) -> None:
        with self._lock:
            self._demands.pop(topic, None)
            self._demands[topic] = None
            while len(self._demands) > self._max_demands:
                del self._demands[next(iter(self._demands))]

    def demands(self) -> list[str]:
        """The pending demands, after dropping those the last push lists."""
        pushed = self.table.pushed_topics()
        with self._lock:
            for topic in [t for t in self._demands if t in pushed]:
                del self._demands[topic]
            return list(self._demands)

    def pending_count(self) -> int:
        with self._lock:
            return len(self._demands)

    # -- activity -----------------------------------------------------------------------
    def appended(self, topic: str) -> None:
        self._appended[topic] = self._clock_ms()  # a dict write is atomic under the GIL

    def fetched(self, topics: Iterable[str]) -> None:
        now = self._clock_ms()
        for topic in topics:
            self._fetched[topic] = now

    def activity(self, led_lane_topics: Iterable[str]) -> list[admin_pb2.LaneTopicActivity]:
        """The activity of ``led_lane_topics``; forgets every other topic's, so the table
        holds only lane topics led here (a deleted one made again starts idle)."""
        led = set(led_lane_topics)
        self._appended = _kept(self._appended, led)
        self._fetched = _kept(self._fetched, led)
        return [
            admin_pb2.LaneTopicActivity(
                topic=topic,
                last_append_ms=self._appended.get(topic, 0),
                last_fetch_ms=self._fetched.get(topic, 0),
            )
            for topic in sorted(led)
        ]

    # -- the heartbeat ------------------------------------------------------------------
    def report(
        self, response: admin_pb2.UpdateMetadataResponse, led_lane_topics: Iterable[str]
    ) -> None:
        """Fill the lane fields of a heartbeat answer."""
        response.lane_topic_demands.extend(self.demands())
        for group_id, topics in sorted(self.consumers()):
            response.lane_consumers.add(group_id=group_id, topics=sorted(set(topics)))
        response.lane_activity.extend(self.activity(led_lane_topics))


def _kept(times: dict[str, int], topics: set[str]) -> dict[str, int]:
    """``times`` restricted to ``topics`` (the same dict when nothing goes)."""
    if times.keys() <= topics:
        return times
    return {topic: ms for topic, ms in list(times.items()) if topic in topics}


def _not_found(message: str) -> MeridianError:
    return MeridianError(ErrorCode.LANE_NOT_FOUND, message)
