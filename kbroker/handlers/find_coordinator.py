"""FindCoordinator (10), versions 0-6: the leader of the key's partition of its internal
topic, created on first use as Kafka does (__transaction_state for transactional ids,
__consumer_offsets for groups), on the listener the request came in on. v4+ batches several
keys."""

from __future__ import annotations

from kbroker.groups.handler_support import coordinator
from kbroker.groups.runtime import CoordinatorError
from kbroker.replication.leader_hints import endpoint
from kbroker.wire.errors import Errors
from kbroker.wire.generated.find_coordinator_response import FindCoordinatorResponse

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

GROUP, TRANSACTION = 0, 1


def _endpoint(ctx):
    """(node id, host, port) of this node on the listener the request came in on."""
    broker = ctx.broker
    for ep in broker._advertised_endpoints():
        if ep.listener_name == ctx.listener_name:
            return broker.node_id, ep.host, ep.port
    ep = broker._advertised_endpoints()[0]
    return broker.node_id, ep.host, ep.port


def _endpoint_of(ctx, node_id: int):
    """(node id, host, port) of ``node_id`` on the request's listener; None while it is not
    a live (registered, unfenced) broker."""
    if node_id == ctx.broker.node_id:
        return _endpoint(ctx)
    ep = endpoint(ctx.broker.image, node_id, ctx.listener_name)
    return None if ep is None else (node_id, ep[0], ep[1])


async def _find(ctx, key_type: int, key: str) -> tuple[int, tuple | None]:
    broker = ctx.broker
    if key_type == TRANSACTION:
        rt = getattr(broker, "txn_coordinator", None)
        if rt is None or not key:
            return (Errors.COORDINATOR_NOT_AVAILABLE if rt is None else Errors.INVALID_REQUEST), None
        err = await rt.ensure_ready(key)
        if err:
            return err, None
        node = rt.coordinator_node(key)
        ep = _endpoint_of(ctx, node) if node >= 0 else None
        if ep is None:
            return Errors.COORDINATOR_NOT_AVAILABLE, None
        return 0, ep
    if key_type == GROUP:
        try:
            groups = coordinator(ctx)    # broker.groups, started on first use
        except CoordinatorError as e:
            return e.code, None
        if not key:
            return Errors.INVALID_REQUEST, None
        if not await groups.ensure_offsets_topic():
            return Errors.COORDINATOR_NOT_AVAILABLE, None
        node = groups.coordinator_node(key)
        ep = _endpoint_of(ctx, node) if node is not None else None
        if ep is None:
            return Errors.COORDINATOR_NOT_AVAILABLE, None
        return 0, ep
    return Errors.INVALID_REQUEST, None


async def _handle(ctx, req):
    v = ctx.api_version
    if v < 4:
        err, ep = await _find(ctx, req.key_type if v >= 1 else GROUP, req.key)
        if err:
            return FindCoordinatorResponse(error_code=err, error_message=None, node_id=-1,
                                           host="", port=-1)
        return FindCoordinatorResponse(error_code=0, error_message=None, node_id=ep[0],
                                       host=ep[1], port=ep[2])
    out = []
    for key in req.coordinator_keys:
        err, ep = await _find(ctx, req.key_type, key)
        if err:
            out.append(FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1,
                                                           error_code=err, error_message=None))
        else:
            out.append(FindCoordinatorResponse.Coordinator(key=key, node_id=ep[0], host=ep[1],
                                                           port=ep[2], error_code=0,
                                                           error_message=None))
    return FindCoordinatorResponse(throttle_time_ms=0, coordinators=out)


def handle(ctx, req):
    return _handle(ctx, req)
