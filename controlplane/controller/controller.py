"""``Controller``: the one active process of a region that keeps its brokers running,
elects partition leaders, pushes metadata to brokers and tracks their liveness.

Every ``tick()`` (the process calls it every ``settings.CONTROLLER_TICK_S``):

1. A standby tries the region's ``Lease``; on winning it becomes active with a new
   controller epoch (``regions.services.take_over_region``), which fences every earlier
   controller at the brokers.
2. The active one checks it is still the one: its lease is held and the region still
   names its epoch (``refresh_controller_seen``, which also marks it alive). Otherwise it
   stops acting at once and is a standby again.
3. For each cluster of the region (not being deleted): the cluster's provisioner
   makes sure its brokers run; ``UpdateMetadata`` is pushed to every broker. A broker
   that answers is ``ready`` (``last_heartbeat_at``); one silent for
   ``settings.BROKER_SESSION_TIMEOUT_S`` (counted from its last heartbeat, or from
   this controller's takeover) is ``unreachable`` with the reason. Then, knowing who
   is live, the leaders' ISR proposals (carried by their answers) are committed,
   leaders are elected (``controlplane.topics.election``: failover from the ISR,
   the dead leave every ISR, preferred leaders come back once live for
   ``settings.PREFERRED_LEADER_DELAY_S``), reassignments progress
   (``controlplane.topics.reassignment``); when anything changed, the push is sent
   again at once so brokers learn it without waiting a tick. A broker whose answer
   shows it restarted (a smaller uptime) counts as dead for that tick, however short
   its outage: it gives up its leaderships and ISR places and rejoins as a follower.
   The brokers' lane reports are fed to the lanes app first (``_lanes``): a demanded
   lane topic is created as desired state (the reconciler makes it on its brokers, and
   a later tick elects and pushes its leaders); a change of a lane's liveness is
   pushed at once too.
   A broker that refuses the push as STALE_CONTROLLER_EPOCH has accepted a newer
   epoch: if the region names a newer controller, this one steps down; if the region
   still names this controller's epoch, the broker's epoch came from elsewhere (a
   restored database, a recreated region), so the controller advances its epoch by
   one per tick until the brokers accept it. Either way the other brokers and
   clusters of the tick are still served.
   A provisioner that cannot reach what runs the brokers (``ClusterProvisioningError``:
   the Kubernetes API down) blames no broker: the cluster's status reason says why.
   Brokers left ``stopping`` (a provisioner that stops over several ticks) are asked
   again each tick.
4. Clusters being deleted whose provisioner is ``stopped_by_controller`` (Kubernetes)
   are torn down here, a step per tick (``regions.teardown.tear_down_step``): only this
   process reaches the Kubernetes API of the region.
5. The region's mirror workers are supervised (``controller.mirrors``): started,
   restarted on a configuration change, replaced when silent, stopped when their link is
   paused or deleted, their status recorded. That round runs on a thread of its own, so
   it never stretches the tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.controller.leaders import metadata_request
from controlplane.controller.lease import Lease
from controlplane.controller.mirrors import MirrorSupervisor
from controlplane.controller.push import MetadataPusher, PushOutcome
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import DomainError
from controlplane.delays import services as delay_services
from controlplane.lanes import services as lane_services
from controlplane.regions import services, teardown
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.regions.provisioners import (
    ClusterProvisioningError,
    Provisioner,
    ProvisioningError,
    get_provisioner,
)
from controlplane.retries import services as retry_services
from controlplane.topics import reassignment
from controlplane.topics.partitions import (
    Proposal,
    commit_isr_proposals,
    elect_leaders,
    proposals_of,
)

log = logging.getLogger(__name__)

ACTOR = Actor.system("controller")
# Brokers the provisioner does not keep running.
NOT_RUN_PHASES = (BrokerPhase.STOPPING, BrokerPhase.STOPPED, BrokerPhase.DECOMMISSIONED)
# Brokers being retired: they keep that phase (their liveness is their heartbeats) and
# their silence is not an outage of the cluster.
LEAVING_PHASES = (BrokerPhase.DECOMMISSIONING, BrokerPhase.DECOMMISSIONED)


class DeposedError(Exception):
    """A newer controller has taken over the region."""


class Controller:
    def __init__(
        self,
        region_name: str,
        controller_id: str,
        lease: Lease,
        *,
        provisioner_for: Callable[[Cluster], Provisioner] = get_provisioner,
        pusher: MetadataPusher | None = None,
        clock: Callable[[], datetime] = timezone.now,
    ) -> None:
        self.region_name = region_name
        self.controller_id = controller_id
        self.lease = lease
        self.provisioner_for = provisioner_for
        self.pusher = pusher or MetadataPusher(settings.METADATA_PUSH_TIMEOUT_S)
        self.clock = clock
        self.epoch = 0
        self.active = False
        self.active_since: datetime | None = None
        # Broker pk -> since when this controller has seen it live without a break.
        self._live_since: dict[int, datetime] = {}
        # Broker pk -> the uptime it last reported: a smaller one means it restarted.
        self._uptime_ms: dict[int, int] = {}
        # Cluster pk -> why its provisioner could not act on it this tick.
        self._provisioning_problems: dict[int, str] = {}
        self.mirrors = MirrorSupervisor(
            region_name, provisioner_for, clock, is_active=lambda: self.active,
            holds_lease=self.holds_region,
        )  # fmt: skip

    # -- leadership -----------------------------------------------------------------------
    def tick(self) -> None:
        """One round; see the module docstring. Database errors propagate (the caller
        steps down: without its database the controller must not act)."""
        if not self.active and not self._take_over():
            return
        if not self.lease.held():
            self.step_down("lost the lease")
            return
        if not services.refresh_controller_seen(self.region_name, epoch=self.epoch):
            self.step_down("a newer controller took over the region")
            return
        try:
            for cluster in self._clusters():
                self._tick_cluster(cluster)
        except DeposedError as exc:
            self.step_down(str(exc))
            return
        self._tear_down()
        self.mirrors.tick()

    def holds_region(self) -> bool:
        """Whether this controller still acts for its region: active, its lease held,
        and the region naming its epoch (no newer controller took over)."""
        if not self.active or not self.lease.held():
            return False
        return Region.objects.filter(name=self.region_name, controller_epoch=self.epoch).exists()

    def _take_over(self) -> bool:
        if not self.lease.acquire():
            return False
        self.epoch = services.take_over_region(
            self.region_name, controller_id=self.controller_id, actor=ACTOR
        )
        self.active, self.active_since = True, self.clock()
        self.mirrors.reset()
        log.info("controller %s active for %s, epoch %d", self.controller_id,
                 self.region_name, self.epoch)  # fmt: skip
        return True

    def step_down(self, why: str) -> None:
        """Stop acting at once and give the lease up; the next tick tries again."""
        if self.active:
            log.warning("controller %s steps down: %s", self.controller_id, why)
        self.active = False
        self.active_since = None
        self._live_since.clear()
        self._uptime_ms.clear()
        self.lease.release()

    def close(self) -> None:
        """Stop for good: give the lease up (a standby takes over at once)."""
        if self.active:
            log.info("controller %s stops and gives its lease up", self.controller_id)
        self.active = False
        self.mirrors.close()
        self.lease.release()  # the gateway's channels are the process's, shared: kept

    # -- one cluster ----------------------------------------------------------------------
    def _clusters(self) -> list[Cluster]:
        return list(
            Cluster.objects.filter(region__name=self.region_name)
            .exclude(status=ProvisioningStatus.DELETING)
            .select_related("region")
        )

    def _tear_down(self) -> None:
        """A step of deleting each of the region's clusters being deleted whose
        provisioner only this controller can drive (module docstring, 4)."""
        deleting = Cluster.objects.filter(
            region__name=self.region_name, status=ProvisioningStatus.DELETING
        ).select_related("region")
        for cluster in deleting:
            provisioner = self.provisioner_for(cluster)
            if not provisioner.stopped_by_controller:
                continue  # the regions.delete_cluster job stops its brokers
            try:
                if teardown.tear_down_step(cluster, provisioner, actor=ACTOR):
                    log.info("cluster %s deleted", cluster)
            except (ProvisioningError, ClusterProvisioningError) as exc:
                log.error("deleting cluster %s: %s", cluster, exc)

    def _tick_cluster(self, cluster: Cluster) -> None:
        brokers = list(cluster.brokers.select_related("cluster__region"))
        self._ensure_running(cluster, brokers)
        outcomes = self._push(cluster, brokers)
        refused = [b for b in brokers if self._observe(b, outcomes.get(b.pk))]
        self._judge(cluster, brokers)
        if refused:
            self._outrank(refused)
        lanes_changed = self._lanes(cluster, outcomes)
        timer_logs_made = self._timer_logs(cluster, outcomes)
        if self._replicate(cluster, brokers, outcomes) or lanes_changed or timer_logs_made:
            again = self._push(cluster, brokers)
            for broker in brokers:  # heartbeats, not a verdict: the next tick judges
                self._observe(broker, again.get(broker.pk), judge=False)
        self._after_push(cluster, brokers)

    def _push(self, cluster: Cluster, brokers: list[Broker]) -> dict[int, PushOutcome]:
        request = metadata_request(
            cluster, brokers, controller_id=self.controller_id, epoch=self.epoch
        )
        request.delay.CopyFrom(retry_services.delay_push(cluster))
        return self.pusher.push(brokers, request)

    def _replicate(
        self, cluster: Cluster, brokers: list[Broker], outcomes: dict[int, PushOutcome]
    ) -> bool:
        """Commit ISR proposals, elect leaders, move reassignments on; True when any
        partition changed."""
        restarted = self._restarted(brokers, outcomes)
        live = self._live(brokers) - restarted
        settled = self._settled(brokers, live)
        proposals: list[Proposal] = []
        for broker in brokers:
            outcome = outcomes.get(broker.pk)
            if outcome is not None and outcome.response is not None:
                proposals += proposals_of(broker.broker_id, outcome.response)
        changed = commit_isr_proposals(cluster, proposals, live=live, actor=ACTOR)
        changed += elect_leaders(cluster, live=live, settled=settled, actor=ACTOR)
        changed += reassignment.progress(cluster, live=live, actor=ACTOR)
        return changed > 0

    def _lanes(self, cluster: Cluster, outcomes: dict[int, PushOutcome]) -> bool:
        """Feed the brokers' lane reports to the lanes app: demanded lane topics become
        desired state (reconciled at once, and elected below in this tick), liveness and
        traffic are recorded. True when the brokers must hear again now: a demanded lane
        topic exists (the push lists it, which ends the demand) or a lane's live topics
        changed (trunk consumers stop or start reading its records)."""
        answers = [o.response for o in outcomes.values() if o.response is not None]
        found = 0
        for name in sorted({name for answer in answers for name in answer.lane_topic_demands}):
            try:
                topic = lane_services.ensure_lane_topic(name.partition(".")[0], name, actor=ACTOR)
            except DomainError as exc:  # the trunk's cluster refuses: the demand returns
                log.warning("lane topic %s not created: %s", name, exc.message)
                continue
            found += topic is not None
        # With a broker silent this tick, the answers can make a lane live but not end
        # liveness: the silent broker may be the one that sees its consumers.
        reports = [group for answer in answers for group in answer.lane_consumers]
        live_changed = lane_services.record_lane_consumers(
            reports,
            cluster=cluster,
            complete=all(o.response is not None for o in outcomes.values()),
        )
        lane_services.record_lane_activity([a for answer in answers for a in answer.lane_activity])
        return found > 0 or live_changed

    def _timer_logs(self, cluster: Cluster, outcomes: dict[int, PushOutcome]) -> bool:
        """Make the timer logs the brokers were asked for (``delay.timer_log_demands``)
        as desired state (reconciled at once, elected below in this tick); True when one
        exists now, so the brokers hear of it (the push naming it ends the demand)."""
        tenants = sorted(
            {
                tenant
                for outcome in outcomes.values()
                if outcome.response is not None
                for tenant in outcome.response.delay.timer_log_demands
            }
        )
        made = 0
        for tenant in tenants:
            try:
                made += delay_services.ensure_timer_log(cluster, tenant, actor=ACTOR) is not None
            except DomainError as exc:  # the cluster refuses: the demand returns
                log.warning("timer log of %s not created on %s: %s", tenant, cluster, exc.message)
        return made > 0

    def _after_push(self, cluster: Cluster, brokers: list[Broker]) -> None:
        """Work that must follow a push: deleting partitions from brokers that are no
        longer their replicas, finishing decommissions."""
        reassignment.delete_removed(cluster, live=self._live(brokers))
        finished = reassignment.finish_decommissions(cluster, actor=ACTOR)
        stopping = [b for b in brokers if b.phase == BrokerPhase.STOPPING]
        for broker in [*finished, *stopping]:
            try:
                self.provisioner_for(cluster).stop_broker(broker)
            except (ProvisioningError, ClusterProvisioningError) as exc:
                log.error("stopping %s: %s", broker, exc)  # it holds nothing: it can wait

    def _restarted(self, brokers: list[Broker], outcomes: dict[int, PushOutcome]) -> set[int]:
        """Brokers that restarted since their previous answer (a smaller uptime), even
        within the session timeout: for this tick they count as dead, so they lose the
        leadership and ISR places they held (what they hold may be behind what they
        acknowledged before) and rejoin as followers that catch up."""
        restarted = set()
        for broker in brokers:
            outcome = outcomes.get(broker.pk)
            if outcome is None or outcome.response is None:
                continue
            uptime_ms = outcome.response.uptime_ms
            if uptime_ms < self._uptime_ms.get(broker.pk, 0):
                log.warning("broker %s restarted (uptime %d ms)", broker, uptime_ms)
                restarted.add(broker.broker_id)
                self._live_since[broker.pk] = self.clock()
            self._uptime_ms[broker.pk] = uptime_ms
        return restarted

    def _live(self, brokers: list[Broker]) -> set[int]:
        """The broker ids this controller considers live, noting since when."""
        now = self.clock()
        live = {b.broker_id for b in brokers if self._is_live(b, now)}
        for broker in brokers:
            if broker.broker_id in live:
                self._live_since.setdefault(broker.pk, now)
            else:
                self._live_since.pop(broker.pk, None)
        return live

    def _is_live(self, broker: Broker, now: datetime) -> bool:
        if broker.phase == BrokerPhase.READY:
            return True
        if broker.phase != BrokerPhase.DECOMMISSIONING or broker.last_heartbeat_at is None:
            return False
        silent_s = (now - broker.last_heartbeat_at) / timedelta(seconds=1)
        return bool(silent_s <= settings.BROKER_SESSION_TIMEOUT_S)

    def _settled(self, brokers: list[Broker], live: set[int]) -> set[int]:
        """Live brokers seen live for ``settings.PREFERRED_LEADER_DELAY_S`` or more."""
        now = self.clock()
        delay = timedelta(seconds=settings.PREFERRED_LEADER_DELAY_S)
        return {
            b.broker_id
            for b in brokers
            if b.broker_id in live and now - self._live_since[b.pk] >= delay
        }

    def _outrank(self, refused: list[Broker]) -> None:
        names = ", ".join(str(b.broker_id) for b in refused)
        advanced = services.advance_controller_epoch(
            self.region_name, epoch=self.epoch, actor=ACTOR
        )
        if advanced is None:
            raise DeposedError(f"broker {names} refused epoch {self.epoch}: a newer controller")
        log.warning("broker %s refused epoch %d, which the region still names: now %d",
                    names, self.epoch, advanced)  # fmt: skip
        self.epoch = advanced

    def _ensure_running(self, cluster: Cluster, brokers: list[Broker]) -> None:
        provisioner = self.provisioner_for(cluster)
        wanted = [b for b in brokers if b.phase not in NOT_RUN_PHASES]
        self._provisioning_problems.pop(cluster.pk, None)
        try:
            provisioner.ensure_brokers(wanted)
        except ProvisioningError as exc:
            log.error("%s", exc)
            services.set_broker_phase(
                exc.broker, BrokerPhase.UNREACHABLE, actor=ACTOR, reason=exc.message[:2000]
            )
        except ClusterProvisioningError as exc:  # no broker's fault: the cluster says it
            log.error("%s", exc)
            self._provisioning_problems[cluster.pk] = f"provisioner: {exc.message}"[:1000]
        for broker in brokers:  # the provisioner may have recorded a new process
            broker.refresh_from_db()

    def _observe(self, broker: Broker, outcome: PushOutcome | None, judge: bool = True) -> bool:
        """Record a heartbeat or (``judge``) a silence; True when the broker refused the
        epoch."""
        if outcome is not None and outcome.response is not None:
            services.record_heartbeat(
                broker, version=outcome.response.version, at=self.clock(), actor=ACTOR
            )
            return False
        if outcome is not None and outcome.stale_epoch:
            return True
        if not judge or broker.phase in LEAVING_PHASES:
            return False
        silent = self._silent_for(broker)
        if silent <= settings.BROKER_SESSION_TIMEOUT_S:
            return False
        why = outcome.error.message if outcome is not None and outcome.error else "no address"
        reason = f"no heartbeat for {silent:.0f} s: {why}"
        if broker.phase != BrokerPhase.UNREACHABLE or not broker.phase_reason:
            services.set_broker_phase(broker, BrokerPhase.UNREACHABLE, actor=ACTOR, reason=reason)
        return False

    def _silent_for(self, broker: Broker) -> float:
        assert self.active_since is not None
        since = max(filter(None, [broker.last_heartbeat_at, self.active_since]))
        return float((self.clock() - since) / timedelta(seconds=1))

    def _judge(self, cluster: Cluster, brokers: list[Broker]) -> None:
        """ready once every broker has answered; a later outage names the brokers."""
        missing = [
            b.broker_id
            for b in brokers
            if b.phase != BrokerPhase.READY and b.phase not in LEAVING_PHASES
        ]
        problem = self._provisioning_problems.get(cluster.pk, "")
        if not missing:
            services.set_cluster_status(
                cluster, ProvisioningStatus.READY, actor=ACTOR, reason=problem
            )
            return
        names = ", ".join(str(i) for i in missing)
        if cluster.status == ProvisioningStatus.READY:
            reason = "; ".join(filter(None, [f"not answering: broker {names}", problem]))
            services.set_cluster_status(
                cluster, ProvisioningStatus.READY, actor=ACTOR, reason=reason
            )
        else:
            reason = "; ".join(filter(None, [f"waiting for broker {names}", problem]))
            status = ProvisioningStatus.PROVISIONING
            services.set_cluster_status(cluster, status, actor=ACTOR, reason=reason)


def run_forever(controller: Controller, tick_s: float, stopping: Callable[[], bool]) -> None:
    """Tick every ``tick_s`` until ``stopping()``; a failing tick (the database is gone,
    a bug) makes the controller step down, and the loop goes on as a standby."""
    from django.db import close_old_connections

    while not stopping():
        started = time.monotonic()
        close_old_connections()
        try:
            controller.tick()
        except Exception:  # any failure: stop acting, stay alive, retry as a standby
            log.exception("controller tick failed")
            controller.step_down("the tick failed")
        time.sleep(max(0.0, tick_s - (time.monotonic() - started)))
