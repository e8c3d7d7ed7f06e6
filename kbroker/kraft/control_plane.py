"""A node's control plane, as the server wires it: the controller role (controller listener,
ControllerService, session expiry) and the broker role's link to the active controller
(ControllerChannel, BrokerLifecycle, forwarding of admin writes).

``KafkaServer`` calls, in start-up order:

    cp = ControlPlane(server)
    cp.start_controller(controller, runtime)      # controller role: service + cluster control
    cp.dispatcher_for(listener_name, broker_dispatcher)  # controller listeners get theirs
    await cp.start_broker(endpoints)              # register + wait until unfenced -> epoch
    ...
    await cp.stop()                               # controlled shutdown, channel closed

The broker always reaches the controller over the network (its controller listener, or the
voters' listeners from ``controller.quorum.voters`` / ``controller.quorum.bootstrap.servers``).
The one exception is a server started without listeners (``start(listen=False)``: handler
unit tests with a fake clock), which registers through the local runtime.
"""

from __future__ import annotations

import asyncio
import logging

from kbroker.kraft.broker_lifecycle import BrokerLifecycle
from kbroker.kraft.cluster_control import ClusterControl
from kbroker.kraft.controller_apis import ControllerService
from kbroker.kraft.controller_channel import ControllerChannel, create_topics_request, topic_results

log = logging.getLogger("kbroker.kraft.control")

UNFENCE_WAIT_S = 30.0


def _split_host_port(s: str) -> tuple[str, int]:
    host, _, port = s.strip().rpartition(":")
    return host.strip("[]"), int(port)


class ControlPlane:
    def __init__(self, server) -> None:
        self.server = server
        self.config = server.config
        self.service: ControllerService | None = None
        self.channel: ControllerChannel | None = None
        self.lifecycle: BrokerLifecycle | None = None
        self.networked = False
        self._tasks: list[asyncio.Task] = []

    # -- controller role ---------------------------------------------------------------------

    def start_controller(self, controller, runtime) -> None:
        if not self.config.is_controller:
            return
        cluster = ClusterControl(controller, self.server.cluster_id, self.config["broker.session.timeout.ms"])
        cluster.reset_sessions(self.server.clock.now_ms())
        self.service = ControllerService(self.server, runtime, cluster)

    def dispatcher_for(self, listener_name: str, broker_dispatcher):
        if listener_name not in self.config.controller_listener_names:
            return broker_dispatcher
        from kbroker.handlers.dispatcher import Dispatcher
        if self.service is None:
            raise RuntimeError(f"listener {listener_name} is a controller listener but this node is not a controller")
        return Dispatcher(self.server, self.service.specs())

    # -- where the controllers are -----------------------------------------------------------

    def controller_candidates(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every controller listener this node knows of."""
        out: list[tuple[int, str, int]] = []
        raft = getattr(self.server, "raft", None)
        eps = getattr(raft, "voter_endpoints", None)
        if callable(eps):
            out += [(n, h, p) for n, (h, p) in eps().items()]
        for v in self.config.voters:
            if all(v.node_id != o[0] for o in out):
                out.append((v.node_id, v.host, v.port))
        for i, s in enumerate(self.config["controller.quorum.bootstrap.servers"]):
            h, p = _split_host_port(s)
            if all((h, p) != (o[1], o[2]) for o in out):
                out.append((-1 - i, h, p))
        if self.config.is_controller:
            names = self.config.controller_listener_names
            for lst in self.server.listeners:
                if lst.name in names and all(o[0] != self.server.node_id for o in out):
                    host = lst.host if lst.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
                    out.append((self.server.node_id, host, lst.bound_port))
        return out

    def leader_hint(self) -> int | None:
        raft = getattr(self.server, "raft", None)
        lid = getattr(raft, "leader_id", None)
        return lid if isinstance(lid, int) and lid >= 0 else None

    # -- broker role -------------------------------------------------------------------------

    def use_network(self, listening: bool) -> bool:
        return listening and bool(self.controller_candidates())

    async def start_broker(self, endpoints, listening: bool) -> int:
        """Register this broker; the epoch. Over the network when listening."""
        srv = self.server
        cfg = self.config
        if not self.use_network(listening):
            import uuid
            return srv.controller.submit_now(
                lambda c, t: c.register_broker(srv.node_id, uuid.uuid4(), endpoints, cfg["broker.rack"], t))
        self.networked = True
        self.channel = ControllerChannel(self.controller_candidates, self.leader_hint,
                                         request_timeout_ms=cfg["request.timeout.ms"],
                                         client_id=f"broker-{srv.node_id}")
        self.lifecycle = BrokerLifecycle(
            self.channel, broker_id=srv.node_id, cluster_id=srv.cluster_id, listeners=endpoints,
            rack=cfg["broker.rack"], metadata_offset=lambda: srv.image.offset,
            heartbeat_interval_ms=cfg["broker.heartbeat.interval.ms"])
        epoch = await self.lifecycle.register()
        if not await self.lifecycle.wait_unfenced(UNFENCE_WAIT_S):
            log.warning("broker %d is still fenced after %.0f s; serving anyway", srv.node_id, UNFENCE_WAIT_S)
        self._tasks.append(asyncio.create_task(self.lifecycle.run(), name="broker-heartbeat"))
        return self.lifecycle.epoch if self.lifecycle.epoch >= 0 else epoch

    def start_timers(self) -> None:
        if self.service is not None:
            self._tasks.append(asyncio.create_task(self._expire_sessions(), name="broker-sessions"))

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                coro = self.service.tick(self.server.clock.now_ms())
                if coro is not None:
                    fenced = await coro
                    if fenced:
                        log.info("fenced brokers %s: no heartbeat for broker.session.timeout.ms", fenced)
            except Exception:
                log.exception("broker session expiry failed")

    # -- operations the broker itself starts ---------------------------------------------------

    async def create_topics(self, topics, validate_only: bool):
        """The broker's own CreateTopics (auto-create, internal topics) to the controller."""
        from kbroker.kraft.controller_channel import wait_for_image
        req = create_topics_request(topics, validate_only, self.config["request.timeout.ms"])
        resp = await self.channel.send(req)
        await wait_for_image(self.server, req, 19, resp)
        return topic_results(resp)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int):
        from kbroker.wire import registry as wire
        Req = wire.REQUESTS[67]
        while True:
            resp = await self.channel.send(Req(broker_id=broker_id, broker_epoch=self.lifecycle.epoch))
            if resp.error_code == 0:
                return resp.producer_id_start, resp.producer_id_len
            log.warning("AllocateProducerIds: error %d; retrying", resp.error_code)
            await asyncio.sleep(0.1)

    # -- shutdown ----------------------------------------------------------------------------

    async def stop(self, timeout_s: float = 10.0) -> None:
        lc = self.lifecycle
        if lc is not None:
            img = self.server.image
            others = [b for b in img.live_brokers() if b.broker_id != self.server.node_id]
            if others:   # leadership can only move if another broker is there to take it
                await lc.controlled_shutdown(timeout_s)
            lc._stopping = True
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.channel is not None:
            await self.channel.close()
