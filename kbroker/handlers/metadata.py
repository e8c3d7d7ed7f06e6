"""Metadata (3), versions 0-12: brokers, cluster id, controller id, topics and partitions
(with topic ids from v10), auto-creation when both the request and the broker allow it."""

from __future__ import annotations

import asyncio

from kbroker.kraft.controller import validate_topic_name
from kbroker.slices import run_in_slices
from kbroker.wire.errors import Errors
from kbroker.wire.generated.metadata_response import MetadataResponse
from kbroker.wire.primitives import ZERO_UUID, Writer
from kbroker.wire.stitch import halves, write_count

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 12

AUTHORIZED_OPS_OMITTED = -2147483648
# Without an authorizer every operation a resource supports is allowed (Kafka's AclOperation
# codes): topic READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
TOPIC_OPS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# cluster: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
CLUSTER_OPS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition


def brokers_for_listener(image, listener_name: str) -> list:
    out = []
    for b in image.brokers.values():
        if b.fenced:
            continue
        ep = b.endpoints.get(listener_name)
        if ep is None:
            if not b.endpoints:
                continue
            ep = next(iter(b.endpoints.values()))
        out.append(_Broker(node_id=b.broker_id, host=ep[0], port=ep[1], rack=b.rack))
    return out


def client_controller_id(self_id: int, brokers: list) -> int:
    """The controller id a client is told: Kafka's KRaft brokers name a live broker, since
    controllers are no client endpoints, and clients (librdkafka's admin) send controller
    requests to that node, which forwards them. It must be one of ``brokers``: a node not yet
    registered or fenced is not in the list, and an id the client cannot resolve leaves it
    "waiting for controller". This node when live, else the first live broker, else -1."""
    ids = [b.node_id for b in brokers]
    if self_id in ids:
        return self_id
    return ids[0] if ids else -1


def _partition_response(p) -> _Partition:
    return _Partition(error_code=0, partition_index=p.partition_id, leader_id=p.leader,
                      leader_epoch=p.leader_epoch, replica_nodes=p.replicas, isr_nodes=p.isr,
                      offline_replicas=[])


def _topic(t, parts: list, include_ops: bool) -> _Topic:
    return _Topic(error_code=0, name=t.name, topic_id=t.topic_id, is_internal=t.internal,
                  partitions=parts,
                  topic_authorized_operations=TOPIC_OPS if include_ops else AUTHORIZED_OPS_OMITTED)


def topic_response(t, version: int, include_ops: bool) -> _Topic:
    parts = [_partition_response(p) for p in sorted(t.partitions.values(), key=lambda p: p.partition_id)]
    return _topic(t, parts, include_ops)


STEP_PARTITIONS = 128   # partitions built per step of a sliced build (a 1,000-partition topic was one ~3 ms step)


class _EncodedMetadataResponse(MetadataResponse):
    """A full-cluster Metadata response that keeps its encoding: clients ask for every topic
    again and again (librdkafka every metadata.max.age.ms, admin tools), and building and
    encoding 10,000 partitions costs ~20 ms of the event loop each time. Reused while the
    metadata image and the request's shape are unchanged."""

    __slots__ = ("_encoded",)

    def encode_into(self, w, version: int) -> None:
        key = (version, self.throttle_time_ms)   # a quota may set the throttle time later
        enc = self._encoded.get(key)
        if enc is None:
            start = len(w)
            super().encode_into(w, version)
            if not w.regions:
                self._encoded[key] = bytes(w[start:])
            return
        w += enc


_all_topics_cache: dict = {}   # (image id, image offset, version, listener, flags) -> response


_building: dict = {}   # key -> future of a sliced build in progress (shared by requests)
# Above this many partitions a response (an all-topics cache miss, or named topics) is built
# and encoded in slices: 10,000 partitions cost ~20-40 ms of the event loop in one go, and
# every client waited for it (a consumer asks for its own topics: ten of 1,000, 13 ms).
SLICED_BUILD_PARTITIONS = 1000


def _remember(key, resp) -> None:
    if any(k[:3] != key[:3] for k in _all_topics_cache) or len(_all_topics_cache) > 16:
        _all_topics_cache.clear()   # one image at a time: older entries are stale
    _all_topics_cache[key] = resp


def _cached_all_topics(key, build) -> MetadataResponse:
    resp = _all_topics_cache.get(key)
    if resp is None:
        resp = build()
        _remember(key, resp)
    return resp


def _build_steps(broker, image, listener_name, v, cluster_ops, include_ops, sources=None):
    """Generator (kbroker.slices): the response for ``sources`` (image topics, or entries
    already made such as errors; default: every topic), built and encoded a topic at a
    time. The encoding is stitched from the response without topics and each topic's own
    encoding: the topics array is followed only by cluster_authorized_operations (v8-10)
    and the tagged fields (v9+, none)."""
    topics = []
    for t in list(image.topics_by_name.values()) if sources is None else sources:
        if isinstance(t, _Topic):
            topics.append(t)
            continue
        src = sorted(t.partitions.values(), key=lambda p: p.partition_id)
        parts = []
        for i in range(0, len(src), STEP_PARTITIONS):
            parts.extend(_partition_response(p) for p in src[i:i + STEP_PARTITIONS])
            yield
        topics.append(_topic(t, parts, include_ops))
        yield
    resp = _response(_EncodedMetadataResponse, broker, image, listener_name, v, cluster_ops, [])
    head, tail = halves(resp, "topics", v, v >= 9, tail_len=(4 if 8 <= v <= 10 else 0) + (1 if v >= 9 else 0),
                        encode=MetadataResponse.encode_into)
    w = Writer()
    w += head
    write_count(w, len(topics), v >= 9)
    for t in topics:
        yield from _encode_topic_steps(t, w, v)
    w += tail
    resp.topics = topics
    resp._encoded[(v, 0)] = bytes(w)
    return resp


def _encode_topic_steps(t: _Topic, w, v: int):
    """Generator: ``t.encode_into(w, v)``, STEP_PARTITIONS partitions a step (encoding a
    1,000-partition topic is ~2 ms). Stitched like the response: the topic without partitions,
    whose partitions array is followed by topic_authorized_operations (v8+) and the tagged
    fields (v9+, none)."""
    head, tail = halves(t, "partitions", v, v >= 9, tail_len=(4 if v >= 8 else 0) + (1 if v >= 9 else 0))
    parts = t.partitions
    w += head
    write_count(w, len(parts), v >= 9)
    for i in range(0, len(parts), STEP_PARTITIONS):
        for p in parts[i:i + STEP_PARTITIONS]:
            p.encode_into(w, v)
        yield
    w += tail


def _sliced_all_topics(key, steps):
    """The cached response, else a coroutine that builds it in slices (one build per key,
    however many requests ask meanwhile)."""
    resp = _all_topics_cache.get(key)
    if resp is not None:
        return resp
    fut = _building.get(key)
    if fut is None:
        async def build():
            try:
                resp = await run_in_slices(steps())
                _remember(key, resp)
                return resp
            finally:
                _building.pop(key, None)
        fut = _building[key] = asyncio.ensure_future(build())

    async def answer():
        return await asyncio.shield(fut)
    return answer()


def _has_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


def _error_topic(name, topic_id, code) -> _Topic:
    return _Topic(error_code=code, name=name, topic_id=topic_id or ZERO_UUID, is_internal=False, partitions=[])


def _response(cls, broker, image, listener_name, v, cluster_ops: bool, topics) -> MetadataResponse:
    brokers = brokers_for_listener(image, listener_name)
    resp = cls(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=client_controller_id(broker.node_id, brokers),
        topics=topics,
        cluster_authorized_operations=CLUSTER_OPS if cluster_ops else AUTHORIZED_OPS_OMITTED,
    )
    if cls is _EncodedMetadataResponse:
        resp._encoded = {}
    return resp


def handle(ctx, req):
    broker = ctx.broker
    image = broker.image
    v = ctx.api_version
    include_ops = v >= 8 and req.include_topic_authorized_operations
    all_topics = req.topics is None or (v == 0 and not req.topics)
    topics: list = []
    missing: list[str] = []
    security = getattr(broker, "security", None)
    # (with an authorizer a response is filtered per principal afterwards: neither shared nor
    # encoded while it is built)
    authorizer = security is not None and security.authorizer is not None
    if all_topics and not authorizer:
        cluster_ops = 8 <= v <= 10 and req.include_cluster_authorized_operations
        key = (id(image), image.offset, len(image.topics_by_name), v, ctx.listener_name, include_ops,
               cluster_ops, broker.cluster_id, broker.node_id)
        if key not in _all_topics_cache and _has_running_loop() and \
                sum(len(t.partitions) for t in image.topics_by_name.values()) > SLICED_BUILD_PARTITIONS:
            return _sliced_all_topics(key, lambda: _build_steps(
                broker, image, ctx.listener_name, v, cluster_ops, include_ops))
        return _cached_all_topics(key, lambda: _response(
            _EncodedMetadataResponse, broker, image, ctx.listener_name, v, cluster_ops,
            [topic_response(t, v, include_ops) for t in image.topics_by_name.values()]))
    # what each requested topic is answered from: an image topic, an entry already made (an
    # error), or None for a missing name (created below, or UNKNOWN_TOPIC_OR_PARTITION)
    if all_topics:
        topics = list(image.topics_by_name.values())
    else:
        seen = set()
        for rt in req.topics:
            name = rt.name
            # v10+: by topic id. The Java client asks with name "" (not null) and a topic id,
            # e.g. to name the topics of a KIP-848 regex assignment; Kafka goes by the id.
            if name is None or (not name and v >= 10 and rt.topic_id not in (None, ZERO_UUID)):
                t = image.topics_by_id.get(rt.topic_id)
                topics.append(_error_topic(None, rt.topic_id, Errors.UNKNOWN_TOPIC_ID) if t is None else t)
                continue
            if name in seen:
                continue
            seen.add(name)
            t = image.topics_by_name.get(name)
            if t is not None:
                topics.append(t)
            elif validate_topic_name(name) is not None:
                topics.append(_error_topic(name, None, Errors.INVALID_TOPIC_EXCEPTION))
            else:
                topics.append(None)
                missing.append(name)
    allow = (v < 4 or req.allow_auto_topic_creation) and broker.config["auto.create.topics.enable"]
    cluster_ops = 8 <= v <= 10 and req.include_cluster_authorized_operations

    def resolved(created: dict) -> list:
        it = iter(missing)
        out = []
        for t in topics:
            if t is None:
                name = next(it)
                t = image.topics_by_name.get(name)
                if t is None:
                    t = _error_topic(name, None, created.get(name, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            out.append(t)
        return out

    def finish(created: dict) -> MetadataResponse:
        return _response(MetadataResponse, broker, image, ctx.listener_name, v, cluster_ops,
                         [t if isinstance(t, _Topic) else topic_response(t, v, include_ops)
                          for t in resolved(created)])

    if missing and allow:
        async def create_then_answer():
            return finish(await broker.auto_topics.create(missing))
        return create_then_answer()
    if not authorizer and _has_running_loop() and sum(
            len(t.partitions) for t in topics if t is not None and not isinstance(t, _Topic)) > SLICED_BUILD_PARTITIONS:
        return run_in_slices(_build_steps(broker, image, ctx.listener_name, v, cluster_ops, include_ops,
                                          resolved({})))
    return finish({})
