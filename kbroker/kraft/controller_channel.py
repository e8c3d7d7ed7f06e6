"""How a broker reaches the active controller: over the network, always (Kafka's
NodeToControllerChannelManager), even when the controller runs in the same process.

``ControllerChannel.send(request)`` sends a controller request (BrokerHeartbeat,
CreateTopics, ...) to the active controller's controller listener and returns its response.
It tries the node the metadata quorum names as leader first, then the other controllers;
a NOT_CONTROLLER answer or a broken connection moves it on, with a backoff between rounds,
until the request timeout. So does the quorum electing another leader while a request waits:
a controller that stopped answering (SIGSTOP, a cut link) keeps its TCP connection open, and
without this every request sent to it just before the election (an ISR shrink, an
auto-create) would wait out its whole timeout. Kafka's channel manager likewise drops its
connection to the old controller when the leader changes. Requests are resent only in those
cases, so a write is resent only if it may not have been applied (a lost connection, or a
controller that lost its leadership and so cannot commit it) or was refused (NOT_CONTROLLER).

Forwarding. Admin requests a broker receives (CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs) are sent on as they are, at the client's version, and
the controller's response goes back to the client (``forwarding_specs``). Kafka wraps them in
an Envelope (api 58) carrying the client's principal, because its controller authorizes them;
here the broker that received the request authorizes it before forwarding (the handlers do),
so the request itself is enough and the controller needs no second authorization path.
After a successful CreateTopics / CreatePartitions / DeleteTopics the broker waits (bounded)
until its own metadata image shows the change and its new replicas are open, so the client's
next Metadata call (or Produce) agrees with the answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from kbroker.kraft.controller_apis import (
    ADMIN_WRITE_MODULES, CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, error_response, response_error,
)
from kbroker.net.client import ClientError, KafkaClient
from kbroker.wire import registry as wire
from kbroker.wire.errors import Errors

log = logging.getLogger("kbroker.kraft.channel")

NOT_CONTROLLER = Errors.NOT_CONTROLLER

Candidates = Callable[[], "list[tuple[int, str, int]]"]   # (node id, host, port) of controllers


class ControllerUnavailable(Exception):
    pass


class LeaderMoved(Exception):
    pass


LEADER_CHECK_S = 0.1    # how often a waiting request looks at who the quorum's leader is


class ControllerChannel:
    def __init__(self, candidates: Candidates, leader_hint: Callable[[], "int | None"] = lambda: None, *,
                 request_timeout_ms: int = 30000, client_id: str = "broker",
                 client_factory=KafkaClient) -> None:
        """``client_factory``: KafkaClient, or one bound to this node's controller-listener
        TLS/SASL (kbroker.security.controller_link)."""
        self.candidates = candidates
        self.leader_hint = leader_hint
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id
        self._client_factory = client_factory
        self._clients: dict[tuple[str, int], KafkaClient] = {}
        self._last_good: int | None = None

    def _client(self, host: str, port: int) -> KafkaClient:
        c = self._clients.get((host, port))
        if c is None:
            c = self._clients[(host, port)] = self._client_factory(
                host, port, client_id=self.client_id, request_timeout_ms=self.request_timeout_ms,
                connect_timeout_ms=min(5000, self.request_timeout_ms))
        return c

    def _order(self) -> list[tuple[int, str, int]]:
        cands = list(self.candidates())
        prefer = self.leader_hint()
        if prefer is None or prefer < 0:
            prefer = self._last_good
        cands.sort(key=lambda c: 0 if c[0] == prefer else 1)
        return cands

    async def send(self, request, version: int | None = None, *, timeout_ms: int | None = None):
        """The active controller's response; raises ControllerUnavailable after the timeout."""
        loop = asyncio.get_running_loop()
        budget = (timeout_ms or self.request_timeout_ms) / 1000
        deadline = loop.time() + budget
        backoff = 0.05
        last = "no controller known"
        while True:
            for node, host, port in self._order():
                left = deadline - loop.time()
                if left <= 0:
                    break
                client = self._client(host, port)
                try:
                    resp = await self._send_while_leader(client, node, request, version, left)
                except ClientError as e:
                    last = f"controller {node} at {host}:{port}: {e}"
                    continue
                except LeaderMoved as e:
                    last = str(e)
                    if self._last_good == node:
                        self._last_good = None
                    continue
                if response_error(resp) == NOT_CONTROLLER:
                    last = f"controller {node} is not the active controller"
                    if self._last_good == node:
                        self._last_good = None
                    continue
                self._last_good = node
                return resp
            left = deadline - loop.time()
            if left <= 0:
                raise ControllerUnavailable(f"no active controller answered within {budget * 1000:.0f} ms ({last})")
            await asyncio.sleep(min(backoff, left))
            backoff = min(backoff * 2, 1.0)

    async def _send_while_leader(self, client: KafkaClient, node: int, request, version, left: float):
        """``client.send``, given up (LeaderMoved) once the quorum names a new leader other
        than ``node``; the answer, if it still comes, is dropped by the client.

        Only a *change* of the named leader counts: right after a failover this broker may
        still name the dead leader while ``node`` (tried because the dead one refused) is
        already the new one and is applying the request; giving up on it then would resend
        an applied write (CreateTopics answered TOPIC_ALREADY_EXISTS)."""
        named_at_send = self.leader_hint()
        task = asyncio.ensure_future(client.send(request, version, timeout_ms=int(left * 1000)))
        try:
            while True:
                done, _ = await asyncio.wait((task,), timeout=LEADER_CHECK_S)
                if done:
                    return task.result()
                leader = self.leader_hint()
                # node < 0: a bootstrap address, whose node id is not known
                if (node >= 0 and leader is not None and leader >= 0 and leader != node
                        and leader != named_at_send):
                    task.cancel()
                    raise LeaderMoved(f"controller {node} stopped answering and node {leader} is now the leader")
        except asyncio.CancelledError:
            task.cancel()
            raise

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._clients.values()), return_exceptions=True)
        self._clients.clear()


# -- forwarding --------------------------------------------------------------------------------

async def wait_for_image(server, request, api_key: int, resp, timeout_s: float = 5.0) -> None:
    """Until this broker's image shows what a forwarded CreateTopics / CreatePartitions created
    (or a DeleteTopics removed), and this broker's replicas of new partitions are open;
    bounded: the answer is the controller's either way."""
    if getattr(request, "validate_only", False):
        return
    image = server.image
    if api_key == CREATE_TOPICS:
        names = [t.name for t in resp.topics if t.error_code == 0]
        done = lambda: all(image.topic(n) is not None for n in names)  # noqa: E731
    elif api_key == DELETE_TOPICS:
        names = [r.name for r in resp.responses if r.error_code == 0 and r.name]
        done = lambda: all(image.topic(n) is None for n in names)  # noqa: E731
    elif api_key == CREATE_PARTITIONS:
        ok = {r.name for r in resp.results if r.error_code == 0}
        want = {t.name: t.count for t in request.topics if t.name in ok}
        done = lambda: all((t := image.topic(n)) is not None and len(t.partitions) >= c  # noqa: E731
                           for n, c in want.items())
    else:
        return
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    # publishing: the image shows a large batch whose replicas are still being opened (in slices)
    while (not done() or getattr(server.loader, "publishing", 0)) and loop.time() < end:
        await server.loader.changed(end - loop.time())
    if api_key != DELETE_TOPICS and done() and loop.time() < end:
        # This broker's replicas of new partitions are created off the event loop; answer
        # once they exist, so a client that lists offsets or produces next finds them here
        # (librdkafka's 0067 consumes an empty topic right after creating it).
        try:
            await asyncio.wait_for(server.new_partitions_opened(), end - loop.time())
        except asyncio.TimeoutError:
            pass


def forwarding_specs(server, specs: dict) -> dict:
    """``specs`` with the admin writes forwarded to the active controller."""
    from kbroker.handlers.registry import ApiSpec
    out = dict(specs)
    for key in ADMIN_WRITE_MODULES:
        spec = specs.get(key)
        if spec is None:
            continue

        def make(key):
            async def forward(ctx, req):
                try:
                    resp = await server.control.channel.send(req, ctx.api_version)
                except ControllerUnavailable as e:
                    log.warning("forwarding %s: %s", wire.api_name(key), e)
                    return error_response(key, req, Errors.REQUEST_TIMED_OUT, str(e))
                await wait_for_image(server, req, key, resp)
                return resp
            return forward
        out[key] = ApiSpec(spec.api_key, spec.name, spec.min_version, spec.max_version, make(key),
                           spec.request_cls, spec.response_cls)
    return out


# -- requests the broker itself makes -----------------------------------------------------------

def create_topics_request(topics, validate_only: bool, timeout_ms: int):
    Req = wire.REQUESTS[CREATE_TOPICS]
    T = Req.CreatableTopic
    return Req(timeout_ms=timeout_ms, validate_only=validate_only, topics=[
        T(name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
          assignments=[T.CreatableReplicaAssignment(partition_index=p, broker_ids=list(r))
                       for p, r in (t.assignments or {}).items()],
          configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()])
        for t in topics])


def topic_results(resp) -> list:
    """CreateTopicsResponse -> the controller's TopicResult list (overrides = the configs
    the controller reports as dynamic topic configs)."""
    from kbroker.kraft.controller import TopicResult
    DYNAMIC_TOPIC_CONFIG = 1
    out = []
    for t in resp.topics:
        configs = {c.name: c.value for c in (t.configs or []) if c.config_source == DYNAMIC_TOPIC_CONFIG}
        out.append(TopicResult(t.name, t.error_code, t.error_message, t.topic_id if t.error_code == 0 else None,
                               t.num_partitions, t.replication_factor, configs))
    return out
