"""The controller listener: which APIs it serves and how (Kafka's ControllerApis).

A controller listener (``controller.listener.names``) serves only controller APIs, and its
ApiVersions lists only those, as Kafka's does per listener:

* Raft (KIP-595/630/853): Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum, Fetch (of
  ``__cluster_metadata``), FetchSnapshot, AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter: each
  is handed to the Raft driver (``RaftDriver.handle_request(src, request)``).
* Broker lifecycle: BrokerRegistration, BrokerHeartbeat, UnregisterBroker,
  ControllerRegistration (``kbroker.kraft.cluster_control``).
* Metadata writes forwarded by brokers (and sent by admin clients that talk to controllers
  directly, like ``kafka-metadata-quorum.sh --bootstrap-controller``): CreateTopics,
  DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs, AllocateProducerIds,
  UpdateFeatures; and DescribeCluster with the controller endpoint type.

Every metadata write runs on the active controller only; anywhere else it is answered with
NOT_CONTROLLER (the broker's channel then finds the new active controller and retries).
The admin handler modules (``kbroker.handlers.create_topics`` ...) are reused as they are: they
run against ``ControllerSide``, which sends their operations to this node's controller
runtime instead of over the network.
"""

from __future__ import annotations

import logging

from kbroker.handlers import api_versions
from kbroker.handlers.registry import ApiSpec
from kbroker.kraft import create_in_groups
from kbroker.kraft.cluster_control import Registration
from kbroker.kraft.tcp_transport import raft_source
from kbroker.wire import registry as wire
from kbroker.wire.errors import Errors

log = logging.getLogger("kbroker.kraft.controller")


class NotControllerError(Exception):
    """A metadata write reached a controller that is not (or no longer) the active one."""


# API keys
FETCH, CREATE_TOPICS, DELETE_TOPICS, ALTER_CONFIGS, CREATE_PARTITIONS = 1, 19, 20, 33, 37
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 44, 60
VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH_SNAPSHOT = 52, 53, 54, 55, 59
ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, UPDATE_RAFT_VOTER = 80, 81, 82
BROKER_REGISTRATION, BROKER_HEARTBEAT, UNREGISTER_BROKER = 62, 63, 64
ALLOCATE_PRODUCER_IDS, UPDATE_FEATURES, CONTROLLER_REGISTRATION = 67, 57, 70
ALTER_PARTITION = 56

RAFT_APIS = (FETCH, VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH_SNAPSHOT,
             ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, UPDATE_RAFT_VOTER)
# admin writes served by the reused broker handler modules
ADMIN_WRITE_MODULES = {CREATE_TOPICS: "create_topics", DELETE_TOPICS: "delete_topics",
                       CREATE_PARTITIONS: "create_partitions", ALTER_CONFIGS: "alter_configs",
                       INCREMENTAL_ALTER_CONFIGS: "incremental_alter_configs",
                       UPDATE_FEATURES: "update_features",
                       # kbroker.kraft.partition_admin
                       43: "elect_leaders", 45: "alter_partition_reassignments",
                       46: "list_partition_reassignments"}


def error_response(api_key: int, request, code: int, message: str | None = None):
    """The response to ``request`` failing as a whole with ``code`` (every entry carries it)."""
    cls = wire.RESPONSES[api_key]
    if api_key == CREATE_TOPICS:
        R = cls.CreatableTopicResult
        return cls(topics=[R(name=t.name, error_code=code, error_message=message) for t in request.topics])
    if api_key == DELETE_TOPICS:
        R = cls.DeletableTopicResult
        names = list(request.topic_names or []) + [t.name for t in (request.topics or []) if t.name]
        return cls(responses=[R(name=n, error_code=code, error_message=message) for n in names])
    if api_key == CREATE_PARTITIONS:
        R = cls.CreatePartitionsTopicResult
        return cls(results=[R(name=t.name, error_code=code, error_message=message) for t in request.topics])
    if api_key in (ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS):
        R = cls.AlterConfigsResourceResponse
        return cls(responses=[R(error_code=code, error_message=message, resource_type=r.resource_type,
                                resource_name=r.resource_name) for r in request.resources])
    resp = cls()
    resp.error_code = code
    if hasattr(resp, "error_message") and message is not None:
        resp.error_message = message
    return resp


def response_error(resp) -> int:
    """The first error code in a response (top level, then one level of entries)."""
    code = getattr(resp, "error_code", 0) or 0
    if code:
        return code
    for attr in ("topics", "responses", "results"):
        for e in getattr(resp, attr, None) or []:
            c = getattr(e, "error_code", 0) or 0
            if c:
                return c
    return 0


class ControllerSide:
    """What a reused admin handler sees as ``ctx.broker`` on the controller listener: the
    node's server, with metadata operations going to this node's controller runtime."""

    on_controller = True   # (config_changes: any broker's configs are accepted here)

    def __init__(self, server, service: "ControllerService") -> None:
        self._server = server
        self.controller = service         # .submit(op), raising NotControllerError

    def __getattr__(self, name):
        return getattr(self._server, name)

    def __setattr__(self, name, value):
        # handlers that update broker state (config_changes sets default_log_config) update
        # the server itself
        if name in ("_server", "controller"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._server, name, value)

    async def create_topics(self, topics, validate_only: bool = False):
        return await create_in_groups.create_topics(self.controller.submit, topics, validate_only,
                                                    self._server.config["num.partitions"])

    async def delete_topics(self, targets):
        return await self.controller.submit(lambda c, now: c.delete_topics(targets, now))


class ControllerService:
    """The controller role of a node: runs operations on the runtime while active, answers
    the controller listener, and fences brokers whose sessions expire."""

    def __init__(self, server, runtime, cluster_control) -> None:
        self.server = server
        self.runtime = runtime
        self.cluster = cluster_control

    @property
    def active(self) -> bool:
        return self.runtime.active

    async def submit(self, op):
        if not self.active:
            raise NotControllerError(f"node {self.server.node_id} is not the active controller")
        return await self.runtime.submit(op)

    def next_tick_ms(self, now_ms: int, idle_ms: int) -> int:
        """Milliseconds until ``tick`` has work (the next session expiry), at most ``idle_ms``."""
        nxt = self.cluster.next_expiry_ms() if self.active else None
        return idle_ms if nxt is None else max(0, min(idle_ms, nxt - now_ms))

    def tick(self, now_ms: int):
        """Session expiry; returns the coroutine to await, or None when idle."""
        if not self.active or self.cluster.next_expiry_ms() is None:
            return None
        if self.cluster.next_expiry_ms() > now_ms:
            return None
        return self.runtime.submit(lambda c, now: self.cluster.expire_sessions(now))

    # -- the listener's API table ------------------------------------------------------------

    def specs(self) -> dict[int, ApiSpec]:
        import importlib
        out: dict[int, ApiSpec] = {}

        def add(key, lo, hi, fn):
            out[key] = ApiSpec(key, wire.api_name(key), lo, hi, self._guarded(key, fn),
                               wire.REQUESTS[key], wire.RESPONSES[key])

        add(api_versions.API_KEY, 0, 4, lambda ctx, req: self._api_versions(out, ctx))
        for name in ("sasl_handshake", "sasl_authenticate"):   # SASL controller listeners
            mod = importlib.import_module(f"kbroker.handlers.{name}")
            add(mod.API_KEY, mod.MIN_VERSION, mod.MAX_VERSION, mod.handle)
        for key in RAFT_APIS:
            lo, hi = wire.VERSIONS[key]
            add(key, lo, hi, self._raft)
        add(BROKER_REGISTRATION, 0, 4, self._broker_registration)
        add(BROKER_HEARTBEAT, 0, 1, self._broker_heartbeat)
        add(UNREGISTER_BROKER, 0, 0, self._unregister_broker)
        add(ALLOCATE_PRODUCER_IDS, 0, 0, self._allocate_producer_ids)
        add(CONTROLLER_REGISTRATION, 0, 0, self._controller_registration)
        add(ALTER_PARTITION, 0, 3, self._alter_partition)
        side = ControllerSide(self.server, self)
        for key, name in ADMIN_WRITE_MODULES.items():
            mod = importlib.import_module(f"kbroker.handlers.{name}")
            add(key, mod.MIN_VERSION, mod.MAX_VERSION, self._admin(key, mod.handle, side))
        return out

    def _guarded(self, key, fn):
        """``fn`` behind the controller's authorization of its senders (controller_link)."""
        from kbroker.security.controller_link import authorized

        def run(ctx, req):
            if not authorized(self.server, ctx, key):
                return error_response(key, req, Errors.CLUSTER_AUTHORIZATION_FAILED,
                                      "Cluster authorization failed.")
            return fn(ctx, req)
        return run

    def _api_versions(self, specs, ctx):
        from kbroker.wire.generated.api_versions_response import ApiVersionsResponse
        return ApiVersionsResponse(error_code=0, api_keys=api_versions.api_keys(specs))

    async def _raft(self, ctx, req):
        control = self.server.control
        if control.driver is None:
            return error_response(ctx.api_key, req, Errors.UNKNOWN_SERVER_ERROR, "no Raft on this node")
        return await control.handle_request(raft_source(req), req)

    def _admin(self, key, handle, side):
        async def run(ctx, req):
            ctx.broker = side
            try:
                return await handle(ctx, req)
            except NotControllerError as e:
                return error_response(key, req, Errors.NOT_CONTROLLER, str(e))
        return run

    async def _run(self, ctx, req, op):
        try:
            return await self.submit(op)
        except NotControllerError as e:
            raise _Refused(error_response(ctx.api_key, req, Errors.NOT_CONTROLLER, str(e)))

    async def _broker_registration(self, ctx, req):
        reg = Registration(req.broker_id, req.cluster_id, req.incarnation_id,
                           [(l.name, l.host, l.port, l.security_protocol) for l in req.listeners],
                           {f.name: (f.min_supported_version, f.max_supported_version) for f in req.features},
                           req.rack)
        try:
            code, epoch = await self._run(ctx, req, lambda c, now: self.cluster.register(reg, now))
        except _Refused as r:
            return r.response
        if code == 0:
            log.info("registered broker %d (incarnation %s), epoch %d", req.broker_id, req.incarnation_id, epoch)
        return wire.RESPONSES[BROKER_REGISTRATION](error_code=code, broker_epoch=epoch)

    async def _broker_heartbeat(self, ctx, req):
        try:
            a = await self._run(ctx, req, lambda c, now: self.cluster.heartbeat(
                req.broker_id, req.broker_epoch, req.current_metadata_offset, req.want_fence,
                req.want_shut_down, now))
        except _Refused as r:
            return r.response
        return wire.RESPONSES[BROKER_HEARTBEAT](error_code=a.error, is_caught_up=a.is_caught_up,
                                                is_fenced=a.is_fenced, should_shut_down=a.should_shut_down)

    async def _unregister_broker(self, ctx, req):
        try:
            code = await self._run(ctx, req, lambda c, now: self.cluster.unregister(req.broker_id, now))
        except _Refused as r:
            return r.response
        return wire.RESPONSES[UNREGISTER_BROKER](error_code=code)

    async def _allocate_producer_ids(self, ctx, req):
        b = self.runtime.controller.image.brokers.get(req.broker_id)
        if b is None:
            return error_response(ctx.api_key, req, Errors.BROKER_ID_NOT_REGISTERED)
        if b.epoch != req.broker_epoch:
            return error_response(ctx.api_key, req, Errors.STALE_BROKER_EPOCH)
        try:
            start, size = await self._run(ctx, req, lambda c, now: c.allocate_producer_ids(
                req.broker_id, req.broker_epoch, now))
        except _Refused as r:
            return r.response
        return wire.RESPONSES[ALLOCATE_PRODUCER_IDS](error_code=0, producer_id_start=start, producer_id_len=size)

    async def _alter_partition(self, ctx, req):
        try:
            return await self._run(ctx, req, lambda c, now: c.alter_partition(req, ctx.api_version, now))
        except _Refused as r:
            return r.response

    async def _controller_registration(self, ctx, req):
        if not self.active:
            return error_response(ctx.api_key, req, Errors.NOT_CONTROLLER)
        # Controllers' endpoints come from the voter set (static voters or VotersRecord);
        # the registration is acknowledged so that Kafka-style controllers can start.
        return wire.RESPONSES[CONTROLLER_REGISTRATION](error_code=0)


class _Refused(Exception):
    def __init__(self, response) -> None:
        self.response = response
