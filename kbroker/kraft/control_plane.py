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
        self.driver = None
        self.runtime = None
        self.own_listeners: set[str] = set()   # listeners bound here (before the quorum wait)
        self.implicit_listener: str | None = None
        self._tasks: list[asyncio.Task] = []

    # -- the metadata quorum -------------------------------------------------------------------

    async def start_quorum(self, controller, mplog):
        """Raft for ``__cluster_metadata`` over TCP; returns the RaftControllerRuntime once
        this node has caught up with the committed log (leader known, everything applied).
        Binds and serves the controller listeners first: the quorum talks through them."""
        import random

        from kbroker.kraft.driver import RaftDriver
        from kbroker.kraft.quorum_runtime import RaftControllerRuntime
        from kbroker.kraft.quorum_store import FileQuorumStore
        from kbroker.kraft.raft import RaftConfig, RaftNode
        from kbroker.kraft.raft_log import DiskRaftLog
        from kbroker.kraft.snapshots import DirSnapshotStore, SnapshotPolicy, latest
        from kbroker.kraft.tcp_transport import TcpTransport
        from kbroker.clock import SYSTEM_CLOCK
        srv, cfg = self.server, self.config
        rcfg = RaftConfig.from_kafka(cfg)
        rcfg.cluster_id = srv.cluster_id
        snaps = DirSnapshotStore(mplog.dir)
        voters = {v.node_id for v in cfg.voters} or None
        if voters is None and cfg.is_controller and latest(snaps) is None \
                and not cfg["controller.quorum.bootstrap.servers"]:
            voters = {srv.node_id}      # the embedded single node: a quorum of one
        store = FileQuorumStore(mplog.dir, srv.cluster_id, kraft_version=0 if voters else 1)
        boot = [-1 - i for i in range(len(cfg["controller.quorum.bootstrap.servers"]))]
        node = RaftNode(srv.node_id, DiskRaftLog(mplog), store, snaps, rcfg, random.Random(),
                        voters=voters, now_ms=SYSTEM_CLOCK.monotonic_ms(), bootstrap=boot)
        self.transport = TcpTransport(srv.node_id, self._endpoint_of,
                                      request_timeout_ms=cfg["controller.quorum.request.timeout.ms"],
                                      client_factory=self._controller_client_factory())
        self.driver = RaftDriver(node, self.transport, clock=SYSTEM_CLOCK.monotonic_ms)
        policy = SnapshotPolicy(max_bytes=cfg["metadata.log.max.record.bytes.between.snapshots"],
                                interval_ms=cfg["metadata.log.max.snapshot.interval.ms"])
        runtime = RaftControllerRuntime(controller if cfg.is_controller else None, srv.image, self.driver,
                                        now_ms=srv.clock.now_ms, snapshot_policy=policy)
        self.runtime = runtime
        if cfg.is_controller:
            self.start_controller(controller, runtime)
            runtime.on_activate.append(self._on_activate)
            await self._serve_controller_listeners()
        self.driver.start()
        self._tasks.append(asyncio.create_task(runtime.watch(), name="metadata-quorum-watch"))
        waited = 0
        while not await runtime.wait_caught_up(5.0):
            if self.transport.inconsistent_cluster is not None:
                raise RuntimeError(
                    f"node {srv.node_id} is formatted for cluster {srv.cluster_id}, but controller "
                    f"{self.transport.inconsistent_cluster} belongs to another cluster "
                    "(INCONSISTENT_CLUSTER_ID): format every node with the same cluster id (kbroker format -t)")
            waited += 5
            log.info("waiting for the metadata quorum (%d s): leader %d, epoch %d, high watermark %d, applied %d",
                     waited, node.leader_id, node.epoch, node.high_watermark, runtime.applied)
        log.info("caught up with the metadata log at offset %d (leader %d, epoch %d)",
                 runtime.applied, node.leader_id, node.epoch)
        return runtime

    def _controller_client_factory(self):
        """KafkaClient with this node's TLS/SASL for controller listeners (controller_link)."""
        import functools

        from kbroker.net.client import KafkaClient
        from kbroker.security.controller_link import client_security
        ssl, sasl = client_security(self.config)
        return functools.partial(KafkaClient, ssl=ssl, sasl=sasl) if ssl or sasl else KafkaClient

    def _endpoint_of(self, node_id: int):
        boot = self.config["controller.quorum.bootstrap.servers"]
        if node_id < 0 and -node_id - 1 < len(boot):      # an observer's bootstrap destination
            return _split_host_port(boot[-node_id - 1])
        for v in self.config.voters:
            if v.node_id == node_id:
                return v.host, v.port
        node = getattr(getattr(self, "driver", None), "node", None)
        if node is not None:                              # KIP-853 voter endpoints (VotersRecord)
            voter = node.voter_entries.get(node_id)
            eps = list(getattr(voter, "endpoints", None) or [])
            names = self.config.controller_listener_names
            eps.sort(key=lambda e: 0 if e.name in names else 1)
            if eps:
                return eps[0].host, eps[0].port
        return None

    def voter_endpoints(self) -> dict:
        node = self.driver.node
        return {v: ep for v in node.voters if (ep := self._endpoint_of(v)) is not None}

    @property
    def leader_id(self) -> int:
        return self.driver.node.leader_id

    async def handle_request(self, src: int, request):
        return await self.driver.handle_request(src, request)

    def _on_activate(self, now_ms: int) -> None:
        self.service.cluster.reset_sessions(now_ms)
        from kbroker.kraft.controller import METADATA_VERSION_FEATURE
        if METADATA_VERSION_FEATURE not in self.runtime.controller.image.features:
            t = asyncio.ensure_future(self.runtime.submit(lambda c, now: c.bootstrap(now)))
            t.add_done_callback(lambda f: f.cancelled() or f.exception() is None
                                or log.warning("bootstrap records: %s", f.exception()))

    def _controller_endpoints(self):
        """The controller listeners to serve. A controller configured without one (the
        embedded single-node default) gets a loopback listener on a kernel-chosen port, so
        its broker still reaches it over the network."""
        from kbroker.config import Endpoint
        names = self.config.controller_listener_names
        eps = [ep for ep in self.config.listeners if ep.listener_name in names]
        if not eps:
            taken = {ep.listener_name for ep in self.config.listeners}
            name = "CONTROLLER" if "CONTROLLER" not in taken else "CONTROLLER_INTERNAL"
            self.implicit_listener = name
            eps = [Endpoint(name, "127.0.0.1", 0, "PLAINTEXT")]
            log.info("no controller listener configured: serving the controller on a loopback port (%s)", name)
        return eps

    def _is_controller_listener(self, name: str) -> bool:
        return name in self.config.controller_listener_names or name == self.implicit_listener

    async def _serve_controller_listeners(self) -> None:
        from kbroker.net.listener import Listener
        from kbroker.wire.frame import FrameDecoder
        srv, cfg = self.server, self.config
        max_frame = cfg["socket.request.max.bytes"]
        for ep in self._controller_endpoints():
            lst = Listener(ep.listener_name, ep.host, ep.port, self.dispatcher_for(ep.listener_name, None),
                           lambda: FrameDecoder(max_frame), backlog=cfg["socket.listen.backlog.size"],
                           connection_factory=srv.security.connection_factory(ep.listener_name)
                           if srv.security is not None else None)
            lst.bind()
            lst.start_accepting()
            srv.listeners.append(lst)
            self.own_listeners.add(ep.listener_name)

    # -- controller role ---------------------------------------------------------------------

    def start_controller(self, controller, runtime) -> None:
        if not self.config.is_controller:
            return
        cluster = ClusterControl(controller, self.server.cluster_id, self.config["broker.session.timeout.ms"])
        cluster.reset_sessions(self.server.clock.now_ms())
        self.service = ControllerService(self.server, runtime, cluster)

    def dispatcher_for(self, listener_name: str, broker_dispatcher):
        if not self._is_controller_listener(listener_name):
            return broker_dispatcher
        from kbroker.handlers.dispatcher import Dispatcher
        if self.service is None:
            raise RuntimeError(f"listener {listener_name} is a controller listener but this node is not a controller")
        return Dispatcher(self.server, self.service.specs())

    # -- where the controllers are -----------------------------------------------------------

    def controller_candidates(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every controller listener this node knows of."""
        out: list[tuple[int, str, int]] = []
        if self.driver is not None:
            out += [(n, h, p) for n, (h, p) in self.voter_endpoints().items()]
        for v in self.config.voters:
            if all(v.node_id != o[0] for o in out):
                out.append((v.node_id, v.host, v.port))
        for i, s in enumerate(self.config["controller.quorum.bootstrap.servers"]):
            h, p = _split_host_port(s)
            if all((h, p) != (o[1], o[2]) for o in out):
                out.append((-1 - i, h, p))
        if self.config.is_controller:
            for lst in self.server.listeners:
                if self._is_controller_listener(lst.name) and all(o[0] != self.server.node_id for o in out):
                    host = lst.host if lst.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
                    out.append((self.server.node_id, host, lst.bound_port))
        return out

    def leader_hint(self) -> int | None:
        lid = self.driver.node.leader_id if self.driver is not None else None
        return lid if isinstance(lid, int) and lid >= 0 else None

    # -- broker role -------------------------------------------------------------------------

    def use_network(self, listening: bool) -> bool:
        return listening and bool(self.controller_candidates())

    async def start_broker(self, endpoints, listening: bool) -> int:
        """Register this broker; the epoch. Over the network when listening."""
        srv = self.server
        cfg = self.config
        if not cfg.is_broker:
            return -1                  # a controller-only process registers no broker
        if not self.use_network(listening):
            import uuid
            return srv.controller.submit_now(
                lambda c, t: c.register_broker(srv.node_id, uuid.uuid4(), endpoints, cfg["broker.rack"], t))
        self.networked = True
        self.channel = ControllerChannel(self.controller_candidates, self.leader_hint,
                                         request_timeout_ms=cfg["request.timeout.ms"],
                                         client_id=f"broker-{srv.node_id}",
                                         client_factory=self._controller_client_factory())
        self.lifecycle = BrokerLifecycle(
            self.channel, broker_id=srv.node_id, cluster_id=srv.cluster_id, listeners=endpoints,
            rack=cfg["broker.rack"], metadata_offset=lambda: srv.image.offset,
            heartbeat_interval_ms=cfg["broker.heartbeat.interval.ms"])
        epoch = await self.lifecycle.register()
        if not await self.lifecycle.wait_unfenced(UNFENCE_WAIT_S):
            log.warning("broker %d is still fenced after %.0f s; serving anyway", srv.node_id, UNFENCE_WAIT_S)
        elif not await self._image_shows_unfenced(UNFENCE_WAIT_S):
            log.warning("broker %d: unfenced, but not yet in its own metadata after %.0f s; serving anyway",
                        srv.node_id, UNFENCE_WAIT_S)
        self._tasks.append(asyncio.create_task(self.lifecycle.run(), name="broker-heartbeat"))
        return self.lifecycle.epoch if self.lifecycle.epoch >= 0 else epoch

    async def _image_shows_unfenced(self, timeout_s: float) -> bool:
        """Wait until this node's metadata image (fed by fetching the committed log, so it lags
        the controller's heartbeat answer) lists this broker unfenced: a client's first Metadata
        must list it, or librdkafka's admin, told a controller id it cannot resolve, waits."""
        srv = self.server
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:
            b = srv.image.brokers.get(srv.node_id)
            if b is not None and not b.fenced:
                return True
            if loop.time() >= end:
                return False
            await srv.loader.changed(end - loop.time())

    def start_timers(self) -> None:
        if self.service is not None:
            self._tasks.append(asyncio.create_task(self._expire_sessions(), name="broker-sessions"))
            self._tasks.append(asyncio.create_task(self._partition_tasks(), name="partition-tasks"))

    async def _partition_tasks(self) -> None:
        """Leader rebalance and unclean elections on the active controller
        (kbroker.kraft.partition_admin.PartitionTasks)."""
        from kbroker.kraft.partition_admin import PartitionTasks
        clock = self.server.clock
        tasks = PartitionTasks.from_config(self.config, lambda: self.service.cluster.unclean_default,
                                           clock.now_ms())
        while True:
            await asyncio.sleep(0.5)
            op = tasks.op(clock.now_ms()) if self.service.active else None
            if op is None:
                continue
            try:
                await self.service.runtime.submit(op)
            except Exception as e:   # lost leadership meanwhile: the next active controller runs it
                log.info("partition tasks: %s", e)

    async def _expire_sessions(self) -> None:
        clock = self.server.clock
        while True:
            # at the next session expiry, as Kafka schedules its fencing check (a fixed
            # 500 ms poll fenced a dead broker up to half a second late)
            await asyncio.sleep(max(10, self.service.next_tick_ms(clock.now_ms(), 500)) / 1000)
            try:
                coro = self.service.tick(self.server.clock.now_ms())
                if coro is not None:
                    fenced = await coro
                    if fenced:
                        log.info("fenced brokers %s: no heartbeat for broker.session.timeout.ms", fenced)
            except Exception:
                log.exception("broker session expiry failed")

    def follow_leader_epochs(self, replicas) -> None:
        """Keep hosted partitions' leader epochs in step with PartitionChangeRecords (fencing,
        controlled shutdown move leaders and bump epochs). The repl helper's replica manager
        takes this over with real leader/follower transitions."""
        image = self.server.image

        def on_record(rec, change, offset):
            if type(rec).__name__ != "PartitionChangeRecord" or rec.leader == -2:
                return
            t = image.topics_by_id.get(rec.topic_id)
            p = replicas.get(t.name, rec.partition_id) if t is not None else None
            if p is not None and rec.partition_id in t.partitions:
                p.leader_epoch = t.partitions[rec.partition_id].leader_epoch
        if not hasattr(replicas, "on_partition_change"):
            self.server.loader.publishers.append(on_record)

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
            def others_live() -> bool:   # leadership can only move to another live broker
                return any(b.broker_id != self.server.node_id for b in self.server.image.live_brokers())
            if others_live():
                await lc.controlled_shutdown(timeout_s, needed=others_live)
            lc._stopping = True
        if self.driver is not None:
            await self.driver.close()      # a leader hands over at once (EndQuorumEpoch)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.channel is not None:
            await self.channel.close()
        if self.driver is not None:
            await self.transport.close()
