"""The broker process: storage, metadata quorum, partition logs, listeners, shutdown.

``KafkaServer(config).start()`` brings a node up in Kafka's order:

1. storage: every log dir formatted (``meta.properties``; formatted on first start),
   clean-shutdown markers read and removed;
2. metadata: the ``__cluster_metadata-0`` log replayed into the controller's and the broker's
   images, the single voter elected, bootstrap records written on a new cluster, this broker
   registered (RegisterBrokerRecord + UnfenceBrokerRecord);
3. partitions: every partition of the image hosted here opened (``ReplicaManager``);
4. listeners: one per ``listeners`` entry, all sharing one dispatcher.

``shutdown()`` reverses it: stop accepting, let connections finish their in-flight requests
and write their responses, close the logs (flush, producer-state snapshots), close the
metadata log, write the clean-shutdown markers.

Subsystems reach each other through this object (handlers get it as ``ctx.broker``):
``image`` (committed metadata), ``controller`` (``ControllerRuntime``: ``await
controller.submit(op)``), ``replicas`` (partitions, ``append``), ``fetch_sessions``,
``producer_ids``. A coordinator runtime (groups, transactions) appends to its internal
partitions with ``replicas.append(part, buf, now_ms, origin="coordinator")`` and awaits
``wait_for_commit`` before it answers; on one node the append is committed on return.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from kbroker.broker import fetch_sessions
from kbroker.broker.fetch_sessions import FetchSessionCache
from kbroker.broker.producer_ids import ProducerIdManager
from kbroker.broker.replica_manager import ReplicaManager
from kbroker.broker.storage import ensure_formatted
from kbroker.clock import SYSTEM_CLOCK, Clock
from kbroker.config import SECURITY_PROTOCOL_IDS, BrokerConfig
from kbroker.kraft import create_in_groups
from kbroker.kraft.controller import EXTRA_TOPIC_CONFIGS, Controller
from kbroker.kraft.image import MetadataImage
from kbroker.kraft.runtime import METADATA_TOPIC, ControllerRuntime, MetadataLog, QuorumState
from kbroker.log.config import LogConfig
from kbroker.net.listener import Listener
from kbroker import gc_policy
from kbroker.slices import each, run_in_slices

log = logging.getLogger("kbroker.server")

# DescribeConfigs config sources (Kafka's ConfigSource ids)
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


class KafkaServer:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.node_id = config.node_id
        self.cluster_id: str | None = None
        self._local_broker_epoch = -1   # registered through the local runtime (no listeners)
        self.image = MetadataImage()
        self.controller: ControllerRuntime | None = None
        self.replicas: ReplicaManager | None = None
        self.log_manager = None
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.producer_ids: ProducerIdManager | None = None
        self.txn_coordinator = None  # kbroker.txn.runtime.TxnRuntime
        self.groups = None           # kbroker.groups.runtime.GroupCoordinatorRuntime
        self.listeners: list[Listener] = []
        self.default_log_config: LogConfig = config.log_config()
        self._default_props = self.default_log_config.to_props()
        self._builtin_props = LogConfig().to_props()
        self.api_specs = {}
        self.security = None         # kbroker.security.manager.SecurityManager (set at start)
        self.api_versions_cache: dict = {}
        self._tasks: list[asyncio.Task] = []
        from kbroker.loop_probe import LoopLagProbe
        self.loop_probe = LoopLagProbe()   # event-loop lag readings (metrics, benchmarks)
        from kbroker.metrics.requests import RequestMetrics
        self.request_metrics = RequestMetrics()   # counters the dispatcher bumps (kbroker.metrics)
        self.metrics_endpoint = None              # MetricsEndpoint when metrics.port is set
        self.client_telemetry = None              # KIP-714 (kbroker.metrics.telemetry), when configured
        self.freeze_gc = False   # serve(): gc.freeze() long-lived objects (not in test processes)
        self._log_managers: list = []
        from kbroker.kraft.control_plane import ControlPlane
        self.control = ControlPlane(self)  # controller role + the broker's link to the controller
        from kbroker.handlers.auto_create import AutoTopicCreator
        self.auto_topics = AutoTopicCreator(lambda topics: self.create_topics(topics))   # Metadata's
        self._dirs = list(dict.fromkeys(os.path.abspath(d) for d in config.log_dirs + [config.metadata_log_dir]))

    @property
    def broker_epoch(self) -> int:
        """This broker's epoch: the broker lifecycle's when it registered over the network (it
        registers again, with a new epoch, when the controller fences it for good)."""
        lc = self.control.lifecycle
        return lc.epoch if lc is not None else self._local_broker_epoch

    @broker_epoch.setter
    def broker_epoch(self, epoch: int) -> None:
        self._local_broker_epoch = epoch

    # -- topic configs -----------------------------------------------------------------------

    def log_config_for(self, topic: str) -> LogConfig:
        overrides = self.image.topic_configs(topic)
        return self.default_log_config.with_overrides(overrides) if overrides else self.default_log_config

    @staticmethod
    def validate_topic_configs(configs: dict[str, str]) -> None:
        known = set(LogConfig.names()) | EXTRA_TOPIC_CONFIGS
        for k in configs:
            if k not in known:
                raise ValueError(f"Unknown topic config name: {k}")
        LogConfig.from_props(configs)

    def topic_config_entries(self, overrides: dict[str, str]) -> list[tuple[str, str, int]]:
        """(name, effective value, config source) for every topic config, as CreateTopics
        v5+ and DescribeConfigs report them."""
        props = self.default_log_config.with_overrides(overrides).to_props() if overrides else self._default_props
        out = []
        for name in LogConfig.names():
            if name in overrides:
                src = DYNAMIC_TOPIC_CONFIG
            elif self._default_props.get(name) != self._builtin_props.get(name):
                src = STATIC_BROKER_CONFIG
            else:
                src = DEFAULT_CONFIG
            out.append((name, props[name], src))
        for name in sorted(set(overrides) - set(LogConfig.names())):
            out.append((name, overrides[name], DYNAMIC_TOPIC_CONFIG))
        return out

    # -- metadata operations (through the controller) ----------------------------------------

    async def create_topics(self, topics, validate_only: bool = False):
        if self.control.networked:     # through the active controller, over the network
            return await self.control.create_topics(topics, validate_only)
        results = await create_in_groups.create_topics(self.controller.submit, topics, validate_only,
                                                       self.config["num.partitions"])
        if not validate_only:
            await self.new_partitions_opened()
        return results

    async def new_partitions_opened(self) -> None:
        """Until the partitions being created off the event loop exist (a CreateTopics answers
        after its partitions do); the local path and forwarding (controller_channel) both wait here."""
        await self.log_manager.wait_opening()
        if self.freeze_gc:
            # The new partitions' objects live as long as the topic: out of the collector's
            # reach, or every full collection walks them (0.2-0.5 s at 10,000 partitions).
            gc_policy.freeze_survivors()

    async def delete_topics(self, targets):
        return await self.controller.submit(lambda c, now: c.delete_topics(targets, now))

    async def wait_for_commit(self, part, offset: int) -> None:
        """Until ``offset`` of ``part`` is committed (below its high watermark). One node:
        appends are committed when they return; replication will make this wait."""
        return None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, listen: bool = True) -> None:
        """Bring the node up; ``listen=False`` skips the listeners (handler tests)."""
        cfg = self.config
        now = self.clock.now_ms()
        log.info("starting node %d (roles %s), log dirs %s", self.node_id, ",".join(cfg.process_roles), ",".join(cfg.log_dirs))
        if cfg.voters and [v.node_id for v in cfg.voters] != [self.node_id] and not listen:
            raise RuntimeError("without listeners a node runs a single-voter quorum: controller.quorum.voters must list only this node")
        self.cluster_id = ensure_formatted(self._dirs, self.node_id)
        log.info("cluster id %s", self.cluster_id)

        # metadata
        from kbroker.handlers import registry
        from kbroker.handlers.dispatcher import Dispatcher
        self.api_specs = registry.load()
        from kbroker.metrics import setup as metrics_setup
        metrics_setup.register_apis(self)   # KIP-714 telemetry APIs, when configured
        defaults = {"num.partitions": cfg["num.partitions"],
                    "default.replication.factor": cfg["default.replication.factor"],
                    "delete.topic.enable": cfg["delete.topic.enable"],
                    "unclean.leader.election.enable": cfg["unclean.leader.election.enable"]}
        controller = Controller(self.node_id, defaults, config_validator=self.validate_topic_configs)
        from kbroker.security import bootstrap as security_bootstrap
        controller.bootstrap_records = security_bootstrap.read(cfg.metadata_log_dir)
        meta_cfg = LogConfig(segment_bytes=cfg["metadata.log.segment.bytes"], segment_ms=cfg["metadata.log.segment.ms"],
                             retention_ms=-1, retention_bytes=-1)
        # The metadata log is a partition log like the others (Kafka keeps it in the first
        # log dir unless metadata.log.dir says otherwise); its LogManager handles recovery,
        # checkpoints and the clean-shutdown marker.
        from kbroker.log.log_manager import LogManager
        from kbroker.log.fd_cache import raise_open_file_limit
        raise_open_file_limit()   # ulimit -n soft = hard, as Kafka's scripts expect; sizes the descriptor cache
        config_for = lambda topic: meta_cfg if topic == METADATA_TOPIC else None  # noqa: E731
        self.log_manager = LogManager(cfg.log_dirs, self.default_log_config, now_ms=now, config_for=config_for)
        self.log_manager.hold_gc_while_creating = self.freeze_gc   # kbroker.gc_policy
        self._log_managers = [self.log_manager]
        mdir = os.path.abspath(cfg.metadata_log_dir)
        if mdir in self.log_manager.log_dirs:
            meta_lm = self.log_manager
        else:
            meta_lm = LogManager([mdir], meta_cfg, now_ms=now, config_for=config_for)
            self._log_managers.append(meta_lm)
        self._report_recovery()
        # fsyncs of rolled segments, new partition dirs and checkpoints off the event loop
        for lm in self._log_managers:
            lm.start_background_io()
        mplog = meta_lm.get_or_create(METADATA_TOPIC, 0, meta_cfg, now_ms=now)
        # listeners (TLS and SASL per listener, the authorizer: kbroker.security); before the
        # quorum, whose controller listeners are secured too
        from kbroker.security.manager import SecurityManager
        self.security = SecurityManager(cfg, self.image)
        if listen:
            # the Raft quorum over the controller listeners (a quorum of one by default)
            self.controller = await self.control.start_quorum(controller, mplog)
        else:
            # no listeners (handler unit tests, fake clock): the local single-voter runtime
            mlog = MetadataLog(mplog)
            quorum = QuorumState(os.path.join(mplog.dir, "quorum-state"), self.node_id)
            self.controller = ControllerRuntime(controller, self.image, mlog, quorum, self.clock.now_ms)
            n = self.controller.replay()
            log.info("replayed %d metadata records (%d topics, metadata log end offset %d)",
                     n, len(self.image.topics_by_name), mlog.end_offset)
            self.controller.elect()
            self.control.start_controller(controller, self.controller)
        self.loader = self.controller.loader   # committed metadata -> self.image -> publishers
        # dynamic broker configs (log.retention.ms ...) from the metadata log are topic defaults too
        from kbroker.broker.config_catalog import BrokerLayers
        self.default_log_config = BrokerLayers.of(cfg, self.image).topic_defaults()

        # partitions
        self.replicas = ReplicaManager(self.node_id, self.log_manager, self.image, self.log_config_for,
                                       self.clock.now_ms, producer_id_expiration_ms=cfg["producer.id.expiration.ms"])
        self.controller.publishers.append(self.replicas.on_metadata_record)
        from kbroker.replication.throttle import ReplicationThrottles
        self.replication_throttles = ReplicationThrottles(
            self.node_id, lambda: self.image, cfg["replication.quota.window.num"],
            cfg["replication.quota.window.size.seconds"] * 1000)
        self.replicas.role_listeners.append(fetch_sessions.wake_on_role_change)
        from kbroker import state_change_log
        state_change_log.attach(self)   # leader / ISR / fencing lines on kbroker.state.change
        self.control.follow_leader_epochs(self.replicas)
        self.replicas.load_from_image(self.image)
        n_parts = sum(1 for _ in self.replicas.all_partitions())
        log.info("opened %d partition logs", n_parts)

        from kbroker.security.quotas import QuotaConfig, QuotaManager
        self.quotas = QuotaManager(self.image.security, QuotaConfig.from_broker(cfg))   # client quotas
        from kbroker.kraft.controller_channel import forwarding_specs
        dispatcher = Dispatcher(self, self.api_specs)
        forwarding = Dispatcher(self, forwarding_specs(self, self.api_specs))
        from kbroker.wire.frame import FrameDecoder
        max_frame = cfg["socket.request.max.bytes"]
        from kbroker.net.connection_limits import ConnectionLimits
        inter = cfg["inter.broker.listener.name"]   # protected when it is one of several (Kafka)
        limits = ConnectionLimits(cfg, self.image.security.quotas,
                                  exempt_listeners=[inter] if inter and len(cfg.broker_listeners) > 1 else [])
        for ep in (cfg.listeners if listen else []):
            if ep.listener_name in self.control.own_listeners:
                continue       # the controller listeners already serve the quorum
            lst = Listener(ep.listener_name, ep.host, ep.port, self.control.dispatcher_for(ep.listener_name, forwarding),
                           lambda: FrameDecoder(max_frame),
                           backlog=cfg["socket.listen.backlog.size"],
                           send_buffer=cfg["socket.send.buffer.bytes"] if not cfg.is_default("socket.send.buffer.bytes") else -1,
                           recv_buffer=cfg["socket.receive.buffer.bytes"] if not cfg.is_default("socket.receive.buffer.bytes") else -1,
                           connection_factory=self.security.connection_factory(ep.listener_name), limits=limits)
            lst.bind()
            self.listeners.append(lst)
        # bootstrap + registration
        if not listen:   # (a Raft quorum's first active controller writes them)
            self.controller.submit_now(lambda c, t: c.bootstrap(t))
        endpoints = [(e.listener_name, e.host, e.port, SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0))
                     for e in self._advertised_endpoints()]
        self.broker_epoch = await self.control.start_broker(endpoints, listening=listen)
        if not self.control.networked:
            for lst in self.listeners:   # no network path: the broker listeners keep the local one
                if lst.dispatcher is forwarding:
                    lst.dispatcher = dispatcher
        log.info("registered broker %d, epoch %d, endpoints %s", self.node_id, self.broker_epoch,
                 ", ".join(f"{n}://{h}:{p}" for n, h, p, _ in endpoints))
        if cfg.is_broker:
            self._tasks.append(asyncio.create_task(self._sweep_stray_logs(), name="stray-log-sweep"))
        self.producer_ids = ProducerIdManager(self.controller, self.node_id, self.broker_epoch,
                                              allocate=self.control.allocate_producer_ids if self.control.networked else None)
        from kbroker.txn.runtime import TxnRuntime
        self.txn_coordinator = TxnRuntime(self)
        self.txn_coordinator.start()   # reloads __transaction_state, finishes decided txns
        from kbroker.groups.handler_support import attach as attach_groups
        attach_groups(self)            # group coordinator: replays __consumer_offsets, runs its timers

        from kbroker.metrics import setup as metrics_setup
        await metrics_setup.attach(self)   # Prometheus endpoint on metrics.port, if set
        for lst in self.listeners:   # (the controller listeners serve since start_quorum)
            if lst.name not in self.control.own_listeners:
                lst.start_accepting()
        self.loop_probe.start()
        self.control.start_timers()
        from kbroker.replication.driver import ReplicationDriver
        self.replication = ReplicationDriver(self)   # replica fetchers, ISR changes
        self.replication.start()
        self._tasks.append(asyncio.create_task(self._maintenance(), name="log-maintenance"))
        log.info("kbroker node %d started (cluster %s)", self.node_id, self.cluster_id)

    async def _sweep_stray_logs(self) -> None:
        """Kafka's start-up check for stray replica logs, run where Kafka runs it: once this
        broker's image holds its own registration record (the broker epoch is that record's
        offset; the controller calls the broker caught up there), never on a partial image."""
        while self.broker_epoch < 0 or self.image.offset < self.broker_epoch:
            await self.loader.changed(1.0)
        try:
            self.replicas.sweep_stray_logs()
        except Exception:
            log.exception("the stray replica log sweep failed")

    def _advertised_endpoints(self):
        """Advertised listeners, with port 0 replaced by the port actually bound (tests)."""
        from kbroker.config import Endpoint
        bound = {lst.name: lst.bound_port for lst in self.listeners}
        return [Endpoint(e.listener_name, e.host, bound.get(e.listener_name, e.port), e.security_protocol)
                if e.port == 0 else e for e in self.config.advertised_listeners]

    def _report_recovery(self) -> None:
        for lm in self._log_managers:
            rep = lm.load_report
            if rep.logs == 0:
                log.info("no existing logs in %s", ",".join(lm.log_dirs))
            elif rep.clean_dirs and len(rep.clean_dirs) == len(lm.log_dirs):
                log.info("loaded %d logs from %s after a clean shutdown", rep.logs, ",".join(lm.log_dirs))
            else:
                log.info("loaded %d logs from %s; previous shutdown was not clean, %d logs recovered",
                         rep.logs, ",".join(lm.log_dirs), len(rep.recovered))
            for key, r in rep.damaged.items():
                log.warning("recovered %s-%d: %s", key[0], key[1], r)

    async def _maintenance(self) -> None:
        """Retention, flush, compaction, checkpoints and producer-id expiry, each on its
        Kafka schedule (the *.interval.ms / log.cleaner.backoff.ms configs)."""
        cfg = self.config
        schedule = {  # task -> interval in ms (None: disabled)
            "retention": cfg["log.retention.check.interval.ms"],
            "cleaner": cfg["log.cleaner.backoff.ms"] if cfg["log.cleaner.enable"] else None,
            "start-offsets": cfg["log.flush.start.offset.checkpoint.interval.ms"],
        }
        last = {task: self.clock.monotonic_ms() for task in schedule}

        def due(task: str) -> bool:
            every = schedule[task]
            if every is None or self.clock.monotonic_ms() - last[task] < every:
                return False
            last[task] = self.clock.monotonic_ms()
            return True

        tick = min(1.0, *(v / 1000 for v in schedule.values() if v))
        while True:
            await asyncio.sleep(tick)
            now = self.clock.now_ms()
            try:
                for lm in self._log_managers:
                    await lm.run_flush_async(now)
                if due("retention"):
                    # every walk over all partitions in slices that yield to the loop
                    for lm in self._log_managers:
                        await lm.run_retention_async(now)
                    unlink = _unlinker(self.log_manager.io)

                    def prune_producers(p) -> None:
                        p.producer_state.delete_snapshots_before(p.log.log_start_offset, unlink)
                        p.producer_state.remove_expired(now)
                    await run_in_slices(each(list(self.replicas.all_partitions()), prune_producers))
                if due("cleaner"):
                    # One log per pass, the dirtiest first, in slices of a few ms that
                    # yield to the event loop (LogCleaner.clean_async).
                    for lm in self._log_managers:
                        stats = await lm.run_cleaner_async(now, max_logs=1)
                        if stats.logs_cleaned:
                            log.info("log cleaner: %s", stats)
                if due("start-offsets"):
                    for lm in self._log_managers:
                        lm.checkpoint_log_start_offsets()
            except Exception:
                log.exception("log maintenance failed")

    async def shutdown(self, timeout: float = 30.0) -> None:
        log.info("shutting down node %d", self.node_id)
        await self.control.stop()
        for lst in self.listeners:
            lst.stop_accepting()
        await asyncio.gather(*(lst.shutdown(timeout) for lst in self.listeners), return_exceptions=True)
        log.info("connections closed")
        self.loop_probe.stop()
        from kbroker.metrics import setup as metrics_setup
        await metrics_setup.detach(self)
        self.auto_topics.close()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.txn_coordinator is not None:
            await self.txn_coordinator.stop()
        if self.groups is not None:
            await self.groups.shutdown()
        if getattr(self, "replication", None) is not None:
            await self.replication.stop()
        if self.replicas is not None:
            self.replicas.close()   # producer-state snapshots
        for lm in self._log_managers:
            lm.shutdown()           # flush, checkpoints, close, .kafka_cleanshutdown
        log.info("shutdown complete: logs flushed and closed, clean-shutdown markers written")


def _unlinker(io):
    """``unlink(paths)`` in the log IO thread (hundreds of files after a big retention pass
    held the event loop for half a second), or None: here."""
    if io is None:
        return None

    def unlink_all(paths) -> None:
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
    return lambda paths: io.submit(unlink_all, list(paths))


async def serve(config: BrokerConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
    """Run a node until SIGTERM/SIGINT, then shut down cleanly."""
    server = KafkaServer(config, clock)
    server.freeze_gc = True
    gc_policy.for_serving()
    # Worker threads (log IO, partition creation) run Python code too: a thread holding the
    # GIL makes the event loop wait up to the switch interval (5 ms by default) each time it
    # wants it back. 1 ms keeps a busy worker from adding loop lag.
    import sys
    sys.setswitchinterval(0.001)
    from kbroker.log.fd_cache import raise_open_file_limit
    from kbroker.log import fill_ahead
    fill_ahead.ZEROS = bool(config["log.zero.fill.ahead"])   # process-wide, like the switch interval
    fill_ahead.ALLOCATE = bool(config["log.allocate.ahead"])
    raise_open_file_limit()   # before the worker threads start: the table then grows without a wait
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, lambda s=sig: (log.info("received %s", signal.Signals(s).name), stop.set()))
        except (NotImplementedError, RuntimeError):
            pass
    # start-up can wait for the quorum indefinitely (controllers down, or refusing this
    # node's credentials): a signal then ends the wait instead of being ignored
    starting = asyncio.create_task(server.start(), name="start-up")
    stopping = asyncio.create_task(stop.wait(), name="stop-signal")
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        log.info("stopping before start-up finished")
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await server.shutdown(timeout=1.0)
        return
    stopping.cancel()
    try:
        starting.result()
    except BaseException:
        log.exception("start-up failed")
        await server.shutdown(timeout=1.0)
        raise
    # Everything built at start-up (metadata image, codecs, logs, coordinators) lives as long
    # as the process: move it out of the collector's generations so a full collection
    # during serving does not walk it (a pause on the event loop). Only the young
    # generations are collected first: the listeners already serve, and a full collection
    # here walked everything start-up built (24-82 ms with a small log; more with thousands
    # of partitions); start-up's few cyclic leftovers in the old generation stay frozen.
    gc_policy.freeze_survivors()
    await stop.wait()
    await server.shutdown()
