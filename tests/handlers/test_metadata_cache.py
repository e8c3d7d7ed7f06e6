"""Full-cluster Metadata responses are reused while the image is unchanged, and rebuilt when
it changes (a new topic, a deleted one); the cached encoding is the codec's own."""
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.generated.metadata_response import MetadataResponse
from kbroker.wire.primitives import Writer

from tests.handlers.test_handlers import create


def _all(h, version):
    resp = h.call(3, version, MetadataRequest(topics=None, allow_auto_topic_creation=False))
    w = Writer()
    resp.encode_into(w, version)
    return resp, bytes(w)


def test_all_topics_response_is_reused_until_the_image_changes(broker):
    h = broker
    create(h, "a", partitions=3)
    r1, b1 = _all(h, 12)
    r2, b2 = _all(h, 12)
    assert r2 is r1 and b2 == b1
    # what the cache returns decodes to what an uncached build says
    assert MetadataResponse.decode(b1, 12) == MetadataResponse.decode(
        MetadataResponse(throttle_time_ms=0, brokers=r1.brokers, cluster_id=r1.cluster_id,
                         controller_id=r1.controller_id, topics=r1.topics).encode(12), 12)
    # another version is its own entry, encoded at that version
    r9, b9 = _all(h, 9)
    assert MetadataResponse.decode(b9, 9).topics[0].name == "a"
    create(h, "b", partitions=2)
    r3, b3 = _all(h, 12)
    assert r3 is not r1
    assert sorted(t.name for t in MetadataResponse.decode(b3, 12).topics) == ["a", "b"]
    r3.throttle_time_ms = 7        # a quota sets it later: the encoding follows
    w = Writer()
    r3.encode_into(w, 12)
    assert MetadataResponse.decode(bytes(w), 12).throttle_time_ms == 7


def test_not_shared_when_an_authorizer_filters_per_principal(broker):
    """The ACL layer filters and edits the response per principal afterwards: each request
    must get its own response object, never the shared cached one."""
    from types import SimpleNamespace
    h = broker
    create(h, "a", partitions=1)
    saved = getattr(h.server, "security", None)
    h.server.security = SimpleNamespace(authorizer=object())
    try:
        r1, _ = _all(h, 12)
        r2, _ = _all(h, 12)
        assert r1 is not r2 and type(r1) is MetadataResponse
    finally:
        h.server.security = saved


def test_controller_id_is_always_a_listed_broker(broker):
    """librdkafka's admin sends CreateTopics to Metadata's controller_id and waits "for
    controller" while that id is not among the listed brokers: a node that is fenced (or not
    yet registered) must name a live broker instead, or -1 when there is none."""
    import uuid

    from kbroker.kraft.image import BrokerRegistration
    h = broker
    image = h.server.image
    me = image.brokers[1]
    r, _ = _all(h, 12)
    assert r.controller_id == 1 and [b.node_id for b in r.brokers] == [1]
    image.brokers[2] = BrokerRegistration(2, 5, uuid.uuid4(), dict(me.endpoints), None, fenced=False)
    me.fenced = True
    image.offset += 1                       # (a replayed record moves the offset)
    r, _ = _all(h, 12)
    assert [b.node_id for b in r.brokers] == [2] and r.controller_id == 2
    image.brokers[2].fenced = True
    image.offset += 1
    r, _ = _all(h, 12)
    assert r.brokers == [] and r.controller_id == -1
