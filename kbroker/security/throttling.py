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
The longest of the throttles applies.
"""

from __future__ import annotations

import asyncio
import copy

from kbroker.replication.replica_fetch import replica_of
from kbroker.security import quotas as Q
from kbroker.security.manager import principal_of

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


def apply(ctx, req, resp, request_bytes: int, elapsed_ns: int):
    """The response to send (or an awaitable of it); mutes the connection when throttled."""
    broker = ctx.broker
    qm = getattr(broker, "quotas", None)
    conn = ctx.conn
    if qm is None or conn is None or resp is None or not qm.enabled:
        return resp
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
    throttle = max(bandwidth, request_throttle)
    if throttle <= 0:
        return resp
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
