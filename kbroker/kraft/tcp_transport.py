"""Raft messages over TCP: the ``Transport`` of ``kbroker.kraft.transport`` on top of
``kbroker.net.client.KafkaClient``, to each voter's controller listener.

Client side: ``send(env)`` with a request sends it to ``env.dst`` (one KafkaClient per peer,
pipelined; Kafka's versions negotiated per connection) and hands the response back to the
receiver as ``Envelope(src=env.dst, dst=self, corr=env.corr, msg=response)``. A request that
fails (peer down, timeout, garbage) is simply lost: Raft's own timeouts deal with lost
messages, and a Fetch that is never answered looks exactly like one that was dropped.

Server side: the controller listener's handlers (``kbroker.kraft.controller_apis``) give each
inbound Raft request to ``RaftDriver.handle_request(src, request)``; ``raft_source`` says
which node sent it, from the request itself (Kafka's requests name their sender:
candidate_id, leader_id, replica_id). ``serve(src, request)`` is the same path for a driver
that takes inbound requests through the receiver: it hands the request over with a fresh
correlation id and waits for the response that ``send`` is given for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from kbroker.kraft.transport import Envelope, Receiver
from kbroker.net.client import AuthenticationFailed, ClientError, KafkaClient
from kbroker.wire.errors import Errors

log = logging.getLogger("kbroker.kraft.tcp")


def raft_source(request) -> int:
    """The node id that sent a Raft request, or -1 (an admin client, an unknown sender)."""
    name = type(request).__name__
    try:
        if name == "VoteRequest":
            return request.topics[0].partitions[0].candidate_id
        if name in ("BeginQuorumEpochRequest", "EndQuorumEpochRequest"):
            return request.topics[0].partitions[0].leader_id
        if name == "FetchRequest":
            rs = getattr(request, "replica_state", None)
            rid = getattr(request, "replica_id", -1)
            if rs is not None and getattr(rs, "replica_id", -1) != -1:
                return rs.replica_id
            return rid if isinstance(rid, int) else -1
        if name == "FetchSnapshotRequest":
            return request.replica_id
        if name == "UpdateRaftVoterRequest":
            return request.voter_id
    except (IndexError, AttributeError):
        pass
    return -1


def wire_form(msg, client: KafkaClient):
    """``msg`` as it can be encoded at the version negotiated with the peer: a Fetch at v15+
    names its replica in ReplicaState only (the old top-level ReplicaId must stay -1)."""
    if type(msg).__name__ == "FetchRequest" and getattr(msg, "replica_id", -1) != -1:
        v = client.api_version(msg.API_KEY)
        if v is not None and v >= 15:
            copy = type(msg).__new__(type(msg))
            for f in type(msg).__slots__:
                setattr(copy, f, getattr(msg, f))
            copy.replica_id = -1
            return copy
    return msg


Endpoints = Callable[[int], "tuple[str, int] | None"]


class TcpTransport:
    def __init__(self, node_id: int, endpoint_of: Endpoints, *, request_timeout_ms: int = 2000,
                 client_factory=KafkaClient, client_id: str | None = None) -> None:
        """``endpoint_of(node_id)`` -> (host, port) of that node's controller listener, or
        None while unknown (the voter set can change: KIP-853)."""
        self.node_id = node_id
        self.endpoint_of = endpoint_of
        self.request_timeout_ms = request_timeout_ms
        self._client_factory = client_factory
        self._client_id = client_id or f"raft-{node_id}"
        self._clients: dict[int, KafkaClient] = {}
        self._receiver: Receiver | None = None
        self._tasks: set[asyncio.Task] = set()
        self._serving: dict[tuple[int, int], asyncio.Future] = {}
        self._serve_corr = 0
        self._closed = False
        self.lost = 0          # requests that got no response (metrics, tests)
        # leader endpoints named in Fetch responses (KIP-951 NodeEndpoints): how an observer
        # that only knows controller.quorum.bootstrap.servers reaches the leader
        self.learned: dict[int, tuple[str, int]] = {}
        self.inconsistent_cluster: int | None = None   # a peer that said we are in another cluster
        self._refused_warned: dict[int, float] = {}     # peer -> loop time of the last warning

    def set_receiver(self, receiver: Receiver) -> None:
        self._receiver = receiver

    # -- client side -------------------------------------------------------------------------

    def send(self, env: Envelope) -> None:
        if self._closed:
            return
        if env.is_response:
            fut = self._serving.pop((env.dst, env.corr), None)
            if fut is not None and not fut.done():
                fut.set_result(env.msg)
            return
        task = asyncio.ensure_future(self._roundtrip(env))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _client(self, dst: int) -> KafkaClient | None:
        ep = self.endpoint_of(dst) or self.learned.get(dst)
        if ep is None:
            return None
        c = self._clients.get(dst)
        if c is not None and (c.host, c.port) != tuple(ep):
            # the voter moved (UpdateRaftVoter): drop the old connection
            self._clients.pop(dst)
            t = asyncio.ensure_future(c.close())
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
            c = None
        if c is None:
            c = self._clients[dst] = self._client_factory(
                ep[0], ep[1], client_id=self._client_id, request_timeout_ms=self.request_timeout_ms,
                reconnect_backoff_ms=50, reconnect_backoff_max_ms=self.request_timeout_ms)
        return c

    async def _roundtrip(self, env: Envelope) -> None:
        client = self._client(env.dst)
        if client is None:
            self.lost += 1
            return
        try:
            await client.connect()
            resp = await client.send(wire_form(env.msg, client))
        except ClientError as e:
            self.lost += 1
            log.debug("raft %s to node %d lost: %s", type(env.msg).__name__, env.dst, e)
            self._warn_refused(env.dst, e)
            return
        if getattr(resp, "error_code", 0) == Errors.INCONSISTENT_CLUSTER_ID:
            self.inconsistent_cluster = env.dst
        for ne in getattr(resp, "node_endpoints", None) or ():
            self.learned[ne.node_id] = (ne.host, ne.port)
        if self._receiver is not None and not self._closed:
            self._receiver(Envelope(env.dst, self.node_id, env.corr, resp))

    def _warn_refused(self, dst: int, e: ClientError) -> None:
        """A peer that refuses our credentials or certificate will keep doing so: say it
        (once a minute per peer), since Raft treats it as a silent message loss."""
        text = str(e)
        if not (isinstance(e, AuthenticationFailed) or "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text):
            return
        now = asyncio.get_running_loop().time()
        if now - self._refused_warned.get(dst, -1e9) >= 60:
            self._refused_warned[dst] = now
            log.warning("controller listener of node %d refused this node: %s", dst, text)

    # -- server side -------------------------------------------------------------------------

    async def serve(self, src: int, request, timeout_ms: int | None = None):
        """Deliver an inbound request to the receiver and wait for its response."""
        if self._receiver is None:
            raise RuntimeError("no receiver")
        self._serve_corr = (self._serve_corr + 1) & 0x7FFFFFFF
        key = (src, self._serve_corr)
        fut = asyncio.get_running_loop().create_future()
        self._serving[key] = fut
        self._receiver(Envelope(src, self.node_id, key[1], request))
        try:
            return await asyncio.wait_for(fut, (timeout_ms or self.request_timeout_ms) / 1000)
        finally:
            self._serving.pop(key, None)

    async def close(self) -> None:
        self._closed = True
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self._clients.values()), return_exceptions=True)
        self._clients.clear()
