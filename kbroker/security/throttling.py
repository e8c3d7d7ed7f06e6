"""Applying client quotas to requests: what the dispatcher calls after a handler answered.

As Kafka does since KIP-219: a request over quota is answered at once with
``throttle_time_ms`` and the connection is muted (nothing more is read from it) until the
throttle passes; responses at versions older than the API's KIP-219 version are also held
back for that time, as those clients do not back off by themselves.

* Produce records the request's size against ``producer_byte_rate``.
* Fetch (consumers only; replica fetches are exempt) records the response's size against
  ``consumer_byte_rate``. Unlike Kafka, which takes back a fetch that would be throttled and
  answers it empty, the data goes out and the throttle follows, as for produce: with fetch
  responses near a window's worth of quota (librdkafka fetches 1 MiB per partition), the
  empty answers cost a greedy 1 MiB/s consumer ~10% of its quota (fake-clock runs in
  tests/security/test_quotas.py), while sending first overshoots by at most one response.
* Every request but the exempt ones records its handling time against
  ``request_percentage`` (percent of one thread, per second).
* CreateTopics / CreatePartitions / DeleteTopics record the partitions they create or delete
  against ``controller_mutation_rate``; at the versions that know THROTTLING_QUOTA_EXCEEDED
  (KIP-599) a request arriving while that quota is exhausted is refused topic by topic.
The longest of the throttles applies.
"""

from __future__ import annotations

import asyncio
import copy

from kbroker.replication.replica_fetch import replica_of
from kbroker.security import quotas as Q
from kbroker.security.manager import principal_of
from kbroker.wire.errors import Errors

PRODUCE, FETCH = 0, 1
# Not subject to request quotas (Kafka exempts the SASL/version exchange and cluster actions).
EXEMPT = frozenset({17, 18, 36, 4, 5, 6, 7, 52, 53, 54, 55, 56, 57, 58, 59, 62, 63, 64, 67, 80})
# First version whose clients throttle themselves (AbstractResponse.shouldClientThrottle);
# APIs not listed throttle at every version.
CLIENT_THROTTLES_FROM = {0: 6, 1: 8, 2: 3, 3: 6, 8: 4, 9: 4, 10: 2, 11: 3, 12: 2, 13: 2, 14: 2, 15: 2,
                         16: 2, 18: 2, 19: 3, 20: 2, 21: 1, 22: 1, 23: 1, 24: 1, 25: 1, 26: 1, 28: 1,
                         29: 1, 30: 1, 31: 1, 32: 2, 33: 1, 35: 1, 37: 1, 42: 1}


def user_of(conn) -> str:
    p = principal_of(conn)
    return p.split(":", 1)[1] if ":" in p else p


def _records_size(resp) -> int:
    n = 0
    for t in resp.responses or ():
        for p in t.partitions or ():
            r = p.records
            if r is None:
                continue
            n += r.nbytes if isinstance(r, memoryview) else (len(r) if isinstance(r, (bytes, bytearray)) else r.size)
            n += 48   # partition header fields
    return n


def apply(ctx, req, resp, request_bytes: int, elapsed_ns: int, mutations: "Mutations | None" = None):
    """The response to send (or an awaitable of it); mutes the connection when throttled."""
    broker = ctx.broker
    qm = getattr(broker, "quotas", None)
    conn = ctx.conn
    if qm is None or conn is None or not qm.enabled or (resp is None and ctx.api_key != PRODUCE):
        return resp   # (an acks=0 produce has no answer but still counts, and mutes)
    sec = getattr(broker, "security", None)
    if sec is not None and ctx.listener_name in sec.trusted_listeners:
        return resp
    api = ctx.api_key
    if api == FETCH and replica_of(req, ctx.api_version)[0] >= 0:
        return resp   # replication is not a client
    now = ctx.broker.clock.now_ms()
    user, client = user_of(conn), ctx.client_id or ""
    request_throttle = 0 if api in EXEMPT else qm.record(Q.REQUEST, user, client, elapsed_ns / 1e7, now)
    bandwidth = 0
    if api == PRODUCE:
        bandwidth = qm.record(Q.PRODUCE, user, client, request_bytes, now)
    elif api == FETCH and resp.error_code == 0:
        bandwidth = qm.record(Q.FETCH, user, client, _records_size(resp), now)
    if mutations is not None:
        if mutations.refused is not None:
            bandwidth = mutations.refused.throttle_time_ms
        else:
            spent = mutations.spent(resp)
            if spent:
                bandwidth = qm.record(Q.MUTATION, user, client, spent, now)
    throttle = max(bandwidth, request_throttle)
    if throttle <= 0:
        return resp
    if resp is None:
        mute = getattr(conn, "mute_for", None)
        if mute is not None:
            mute(throttle / 1000.0)
        return None
    if getattr(resp, "throttle_time_ms", None) is not None and resp.throttle_time_ms < throttle:
        resp = copy.copy(resp)   # the handler's response may be cached and shared
        resp.throttle_time_ms = throttle
    mute = getattr(conn, "mute_for", None)
    if mute is not None:
        mute(throttle / 1000.0)
    if ctx.api_version >= CLIENT_THROTTLES_FROM.get(api, 0):
        return resp
    return _delayed(resp, throttle / 1000.0)


async def _delayed(resp, delay_s: float):
    await asyncio.sleep(delay_s)
    return resp


# -- controller_mutation_rate (KIP-599) --------------------------------------------------------

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
STRICT_FROM = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}   # THROTTLING_QUOTA_EXCEEDED known


class Mutations:
    """A topic-mutating request's cost in partitions per topic (counted for the topics that
    succeed), or ``refused``: the answer when the quota was already exhausted."""

    __slots__ = ("cost", "refused")

    def __init__(self, cost: dict, refused=None) -> None:
        self.cost = cost
        self.refused = refused

    def spent(self, resp) -> int:
        items = {CREATE_TOPICS: "topics", DELETE_TOPICS: "responses", CREATE_PARTITIONS: "results"}
        for attr in items.values():
            if hasattr(resp, attr) and getattr(resp, attr) is not None:
                return sum(self.cost.get(r.name, 0) for r in getattr(resp, attr) if r.error_code == 0)
        return 0


def admit_mutations(ctx, req) -> Mutations | None:
    """Before CreateTopics / DeleteTopics / CreatePartitions: their partition counts, and at
    versions that know THROTTLING_QUOTA_EXCEEDED, a refusal of every topic while the
    principal's controller_mutation_rate is exhausted (Kafka's strict quota)."""
    api = ctx.api_key
    if api not in STRICT_FROM:
        return None
    broker = ctx.broker
    qm = getattr(broker, "quotas", None)
    if qm is None or ctx.conn is None or not qm.enabled or getattr(req, "validate_only", False):
        return None
    sec = getattr(broker, "security", None)
    if sec is not None and ctx.listener_name in sec.trusted_listeners:
        return None
    image = broker.image
    if api == CREATE_TOPICS:
        default = broker.config["num.partitions"]
        cost = {t.name: (t.num_partitions if t.num_partitions > 0 else
                         len(t.assignments) if t.assignments else default) for t in req.topics}
    elif api == CREATE_PARTITIONS:
        cost = {}
        for t in req.topics:
            ti = image.topics_by_name.get(t.name)
            cost[t.name] = max(0, t.count - (len(ti.partitions) if ti is not None else 0))
    else:
        cost = {}
        names = list(getattr(req, "topic_names", None) or [])
        for t in getattr(req, "topics", None) or ():
            ti = image.topics_by_id.get(t.topic_id) if t.name is None else image.topics_by_name.get(t.name)
            if ti is not None:
                cost[ti.name] = len(ti.partitions)
        for n in names:
            ti = image.topics_by_name.get(n)
            cost[n] = len(ti.partitions) if ti is not None else 0
    m = Mutations(cost)
    if ctx.api_version < STRICT_FROM[api]:
        return m
    throttle = qm.throttle_if_exceeded(Q.MUTATION, user_of(ctx.conn), ctx.client_id or "", broker.clock.now_ms())
    if throttle > 0:
        m.refused = _refuse_all(api, req, throttle, ctx.api_version)
    return m


def _refuse_all(api, req, throttle: int, version: int):
    msg = "The throttling quota has been exceeded."
    code = Errors.THROTTLING_QUOTA_EXCEEDED
    if api == CREATE_TOPICS:
        from kbroker.wire.generated.create_topics_response import CreateTopicsResponse as R
        return R(throttle_time_ms=throttle, topics=[R.CreatableTopicResult(
            name=t.name, error_code=code, error_message=msg, topic_config_error_code=0, num_partitions=-1,
            replication_factor=-1, configs=None) for t in req.topics])
    if api == CREATE_PARTITIONS:
        from kbroker.wire.generated.create_partitions_response import CreatePartitionsResponse as R
        return R(throttle_time_ms=throttle, results=[R.CreatePartitionsTopicResult(
            name=t.name, error_code=code, error_message=msg) for t in req.topics])
    from kbroker.wire.generated.delete_topics_response import DeleteTopicsResponse as R
    if version < 6:
        return R(throttle_time_ms=throttle, responses=[R.DeletableTopicResult(
            name=n, error_code=code, error_message=msg) for n in req.topic_names])
    return R(throttle_time_ms=throttle, responses=[R.DeletableTopicResult(
        name=t.name, topic_id=t.topic_id, error_code=code, error_message=msg) for t in req.topics])
