"""Broker lifecycle on the active controller (Kafka's ClusterControlManager and
BrokerHeartbeatManager): registration, heartbeats, fencing, controlled shutdown, unregistration.

Pure: every operation takes ``now_ms`` and returns ``ControllerResult(records, response)``
like ``kbroker.kraft.controller.Controller``; the runtime commits the records before the
response leaves. What is in the metadata log (registrations, fenced / in controlled shutdown)
is read from the controller's image. What is not — when each broker was last heard from — lives
here, only on the active controller: a controller that becomes active starts every broker's
session afresh (``reset_sessions``), as Kafka does, so a failover does not fence anybody.

The rules (Kafka's, with its defaults in config):
* a broker registers fenced; its epoch is the offset of its registration record;
* it is unfenced by the heartbeat that shows it has replayed the metadata log up to its own
  registration (``current_metadata_offset >= epoch``): it has caught up;
* no heartbeat for ``broker.session.timeout.ms`` fences it; fencing takes it out of ISRs and
  leaderships (``kbroker.kraft.partition_change.move_off``);
* ``want_shut_down`` puts it in controlled shutdown: its leaderships move away at once; the
  answer says ``should_shut_down`` once it leads nothing, and the broker is fenced then;
* a broker with another incarnation id may take over a registration only if the old one is
  fenced or this controller has not heard from it for a session timeout (else
  DUPLICATE_BROKER_REGISTRATION): after a failover, or a restart of a combined node, the
  restarted broker registers at once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kbroker.kraft.controller import METADATA_VERSION_FEATURE, ControllerResult
from kbroker.kraft.partition_change import elect_where_leaderless, move_off
from kbroker.kraft.records import TYPE_BY_NAME, record_class
from kbroker.wire.errors import Errors


def _cls(name: str):
    return record_class(TYPE_BY_NAME[name])


@dataclass
class Registration:
    broker_id: int
    cluster_id: str
    incarnation_id: uuid.UUID
    listeners: list[tuple[str, str, int, int]]     # (name, host, port, security protocol)
    features: dict[str, tuple[int, int]]           # name -> (min, max) supported
    rack: str | None


@dataclass
class HeartbeatAnswer:
    error: int = 0
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


class ClusterControl:
    def __init__(self, controller, cluster_id: str, session_timeout_ms: int) -> None:
        self.controller = controller          # its image is the controller's view
        self.cluster_id = cluster_id
        self.session_timeout_ms = session_timeout_ms
        self.last_contact: dict[int, int] = {}   # for fencing (fresh on activation)
        self.heard_from: dict[int, int] = {}     # real requests only (duplicate registrations)

    @property
    def image(self):
        return self.controller.image

    @property
    def unclean_default(self) -> bool:
        """The broker-wide ``unclean.leader.election.enable``, dynamic (cluster default) or
        static; topics may override it."""
        from kbroker.kraft.image import BROKER_RESOURCE
        v = self.image.configs.get((BROKER_RESOURCE, ""), {}).get("unclean.leader.election.enable")
        if v is not None:
            return v.strip().lower() == "true"
        return bool(self.controller.defaults.get("unclean.leader.election.enable", False))

    def reset_sessions(self, now_ms: int) -> None:
        """This controller just became active: every registered broker gets a full session."""
        self.last_contact = {b: now_ms for b in self.image.brokers}

    def _alive(self, broker_id: int, now_ms: int) -> bool:
        t = self.last_contact.get(broker_id)
        return t is not None and now_ms - t < self.session_timeout_ms

    # -- registration ------------------------------------------------------------------------

    def register(self, reg: Registration, now_ms: int) -> ControllerResult:
        """Response: (error, broker epoch)."""
        if reg.cluster_id != self.cluster_id:
            return ControllerResult([], (Errors.INCONSISTENT_CLUSTER_ID, -1))
        old = self.image.brokers.get(reg.broker_id)
        heard = self.heard_from.get(reg.broker_id)
        if old is not None and old.incarnation_id != reg.incarnation_id and not old.fenced \
                and heard is not None and now_ms - heard < self.session_timeout_ms:
            return ControllerResult([], (Errors.DUPLICATE_BROKER_REGISTRATION, -1))
        level = self.image.features.get(METADATA_VERSION_FEATURE, 0)
        lo, hi = reg.features.get(METADATA_VERSION_FEATURE, (1, 0))
        if level and not lo <= level <= hi:
            return ControllerResult([], (Errors.UNSUPPORTED_VERSION, -1))
        Reg = _cls("RegisterBrokerRecord")
        epoch = self.controller.next_offset      # the offset this record gets
        rec = Reg(broker_id=reg.broker_id, incarnation_id=reg.incarnation_id, broker_epoch=epoch,
                  end_points=[Reg.BrokerEndpoint(name=n, host=h, port=p, security_protocol=sp)
                              for n, h, p, sp in reg.listeners],
                  features=[Reg.BrokerFeature(name=n, min_supported_version=a, max_supported_version=b)
                            for n, (a, b) in sorted(reg.features.items())],
                  rack=reg.rack, fenced=True)
        # (leaderships stay: the new registration is fenced until it has caught up, and a
        # restarted broker usually takes its partitions straight back; if it does not come
        # back its session expires and fencing moves them)
        records = [rec]
        self.last_contact[reg.broker_id] = self.heard_from[reg.broker_id] = now_ms
        return ControllerResult(records, (Errors.NONE, epoch))

    def unregister(self, broker_id: int, now_ms: int) -> ControllerResult:
        b = self.image.brokers.get(broker_id)
        if b is None:
            return ControllerResult([], Errors.BROKER_ID_NOT_REGISTERED)
        recs = move_off(self.image, {broker_id}, unclean_default=self.unclean_default)
        recs.append(_cls("UnregisterBrokerRecord")(broker_id=broker_id, broker_epoch=b.epoch))
        self.last_contact.pop(broker_id, None)
        return ControllerResult(recs, Errors.NONE)

    # -- heartbeats --------------------------------------------------------------------------

    def heartbeat(self, broker_id: int, broker_epoch: int, metadata_offset: int, want_fence: bool,
                  want_shut_down: bool, now_ms: int) -> ControllerResult:
        b = self.image.brokers.get(broker_id)
        if b is None:
            return ControllerResult([], HeartbeatAnswer(Errors.BROKER_ID_NOT_REGISTERED))
        if b.epoch != broker_epoch:
            return ControllerResult([], HeartbeatAnswer(Errors.STALE_BROKER_EPOCH))
        self.last_contact[broker_id] = self.heard_from[broker_id] = now_ms
        caught_up = metadata_offset >= b.epoch
        records: list = []
        fenced = b.fenced
        shut_down = False
        if want_shut_down:
            if not b.in_controlled_shutdown and not b.fenced:
                records.append(_cls("BrokerRegistrationChangeRecord")(
                    broker_id=broker_id, broker_epoch=b.epoch, in_controlled_shutdown=1))
                records += move_off(self.image, {broker_id}, unclean_default=self.unclean_default)
            elif not self._leads_anything(broker_id):
                shut_down = True
                if not b.fenced:
                    records.append(_cls("FenceBrokerRecord")(id=broker_id, epoch=b.epoch))
                    records += move_off(self.image, {broker_id}, unclean_default=self.unclean_default)
                    fenced = True
        elif want_fence:
            if not b.fenced:
                records.append(_cls("FenceBrokerRecord")(id=broker_id, epoch=b.epoch))
                records += move_off(self.image, {broker_id}, unclean_default=self.unclean_default)
                fenced = True
        elif b.fenced and caught_up and not b.in_controlled_shutdown:
            records.append(_cls("UnfenceBrokerRecord")(id=broker_id, epoch=b.epoch))
            records += elect_where_leaderless(self.image, broker_id, unclean_default=self.unclean_default)
            fenced = False
        return ControllerResult(records, HeartbeatAnswer(Errors.NONE, caught_up, fenced, shut_down))

    def _leads_anything(self, broker_id: int) -> bool:
        return any(p.leader == broker_id for t in self.image.topics_by_id.values() for p in t.partitions.values())

    def expire_sessions(self, now_ms: int) -> ControllerResult:
        """Fence every unfenced broker not heard from for a session timeout."""
        records: list = []
        gone = set()
        for b in self.image.brokers.values():
            if b.fenced:
                continue
            if b.broker_id not in self.last_contact:
                self.last_contact[b.broker_id] = now_ms
            elif not self._alive(b.broker_id, now_ms):
                records.append(_cls("FenceBrokerRecord")(id=b.broker_id, epoch=b.epoch))
                gone.add(b.broker_id)
        if gone:
            records += move_off(self.image, gone, unclean_default=self.unclean_default)
        return ControllerResult(records, sorted(gone))

    def next_expiry_ms(self) -> int | None:
        live = [self.last_contact[b.broker_id] for b in self.image.brokers.values()
                if not b.fenced and b.broker_id in self.last_contact]
        return min(live) + self.session_timeout_ms if live else None
