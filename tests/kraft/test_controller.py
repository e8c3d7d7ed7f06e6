import itertools
import uuid

from kbroker.kraft.controller import Controller, NewTopic
from kbroker.kraft.image import MetadataImage
from kbroker.kraft.records import decode_record, encode_record
from kbroker.wire.errors import Errors

DEFAULTS = {"num.partitions": 2, "default.replication.factor": 1, "delete.topic.enable": True}


def make_controller():
    ids = (uuid.UUID(int=100 + i) for i in itertools.count())
    c = Controller(1, DEFAULTS, uuid_factory=lambda: next(ids))
    return c


def commit(c, result, images=()):
    for rec in result.records:
        off = c.next_offset
        c.replay(rec, off)
        for im in images:
            im.apply(rec, off)
    return result.response


def bootstrap(c, images=()):
    commit(c, c.bootstrap(0), images)
    commit(c, c.register_broker(1, uuid.UUID(int=5), [("PLAINTEXT", "localhost", 9092, 0)], None, 0), images)


def test_create_topics_errors_and_records():
    c = make_controller()
    bootstrap(c)
    res = commit(c, c.create_topics([
        NewTopic("a"), NewTopic("bad/name"), NewTopic("b", num_partitions=0),
        NewTopic("c", replication_factor=3), NewTopic("d", configs={"retention.ms": "1000"}),
        NewTopic("e", assignments={0: [1], 2: [1]}),
    ], False, 0))
    codes = {r.name: r.error for r in res}
    assert codes == {"a": 0, "bad/name": Errors.INVALID_TOPIC_EXCEPTION, "b": Errors.INVALID_PARTITIONS,
                     "c": Errors.INVALID_REPLICATION_FACTOR, "d": 0, "e": Errors.INVALID_REPLICA_ASSIGNMENT}
    assert c.image.topics_by_name["a"].topic_id == res[0].topic_id
    assert len(c.image.topics_by_name["a"].partitions) == 2
    assert c.image.topic_configs("d") == {"retention.ms": "1000"}
    again = commit(c, c.create_topics([NewTopic("a"), NewTopic("x.y"), NewTopic("x_y")], False, 0))
    assert [r.error for r in again] == [Errors.TOPIC_ALREADY_EXISTS, 0, Errors.INVALID_TOPIC_EXCEPTION]


def test_validate_only_writes_nothing():
    c = make_controller()
    bootstrap(c)
    r = c.create_topics([NewTopic("v")], True, 0)
    assert r.records == [] and r.response[0].error == 0


def test_delete_by_name_and_id():
    c = make_controller()
    bootstrap(c)
    res = commit(c, c.create_topics([NewTopic("a"), NewTopic("b")], False, 0))
    out = commit(c, c.delete_topics([("a", None), (None, res[1].topic_id), ("zz", None), (None, uuid.UUID(int=9))], 0))
    assert [r.error for r in out] == [0, 0, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_ID]
    assert c.image.topics_by_name == {} and c.image.topics_by_id == {}


def test_producer_id_blocks_do_not_overlap():
    c = make_controller()
    a = commit(c, c.allocate_producer_ids(1, 0, 0))
    b = commit(c, c.allocate_producer_ids(1, 0, 0))
    assert a == (0, 1000) and b == (1000, 1000)


def test_records_framing_roundtrip_and_replay_builds_same_image():
    c = make_controller()
    written = []
    orig_replay = c.replay

    def capture(rec, off=-1):
        written.append(encode_record(rec))
        orig_replay(rec, off)
    c.replay = capture
    bootstrap(c)
    commit(c, c.create_topics([NewTopic("a", configs={"cleanup.policy": "compact"})], False, 0))
    commit(c, c.delete_topics([("a", None)], 0))
    commit(c, c.create_topics([NewTopic("b", num_partitions=3)], False, 0))
    commit(c, c.allocate_producer_ids(1, 0, 0))
    # Kafka's frame: unsigned varint frame version 1, record type, version
    assert written[0][0] == 1
    replayed = MetadataImage()
    for off, raw in enumerate(written):
        replayed.apply(decode_record(raw), off)
    assert set(replayed.topics_by_name) == {"b"}
    assert replayed.topics_by_name["b"].topic_id == c.image.topics_by_name["b"].topic_id
    assert len(replayed.topics_by_name["b"].partitions) == 3
    assert replayed.next_producer_id == 1000
    assert replayed.features == {"metadata.version": c.image.features["metadata.version"]}
    assert replayed.brokers[1].fenced is False
    assert replayed.configs == {}
