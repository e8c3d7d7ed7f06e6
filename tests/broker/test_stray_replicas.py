"""Stray replica logs: the pure decision (Kafka's isStrayKraftReplica rules) and the replica
manager's start-up sweep over a real LogManager on disk."""
import os
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from kbroker.broker.replica_manager import ReplicaManager
from kbroker.broker.storage import random_uuid, uuid_to_str
from kbroker.broker.stray_replicas import LocalLog, find_stray_logs, stray_reason
from kbroker.kraft.image import MetadataImage
from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager
from kbroker.wire.generated.partition_change_record import PartitionChangeRecord
from kbroker.wire.generated.partition_record import PartitionRecord
from kbroker.wire.generated.remove_topic_record import RemoveTopicRecord
from kbroker.wire.generated.topic_record import TopicRecord
from kbroker.wire.records import BatchBuilder

ME = 1


def _topic(image, name, assignment, tid=None):
    tid = tid or random_uuid()
    image.apply(TopicRecord(name=name, topic_id=tid))
    for p, replicas in enumerate(assignment):
        image.apply(PartitionRecord(partition_id=p, topic_id=tid, replicas=replicas, isr=replicas,
                                    leader=replicas[0], leader_epoch=0, partition_epoch=0,
                                    removing_replicas=[], adding_replicas=[]))
    return tid


def test_the_rules():
    image = MetadataImage()
    here = _topic(image, "here", [[1, 2], [2, 3]])
    old = random_uuid()
    new = _topic(image, "again", [[1]])
    gone = random_uuid()

    def reason(topic, p, tid):
        return stray_reason(ME, image, LocalLog(topic, p, uuid_to_str(tid) if isinstance(tid, uuid.UUID) else tid))

    assert reason("here", 0, here) is None                             # a replica here
    assert "do not include broker 1" in reason("here", 1, here)        # reassigned away
    assert "has no partition 5" in reason("here", 5, here)             # beyond the partition count
    assert "not in the metadata" in reason("deleted", 0, gone)         # topic deleted
    assert "now has another id" in reason("again", 0, old)            # deleted and re-created
    assert reason("again", 0, new) is None
    # no partition.metadata: kept when the name is a replica here (the manager adopts the id)
    assert reason("here", 0, None) is None
    assert "no topic id" in reason("here", 1, None)
    assert "no topic id" in reason("nothing", 0, None)
    assert "no topic id" in reason("here", 1, "not-an-id")
    assert reason("here", 0, "not-an-id") is None
    found = find_stray_logs(ME, image, [LocalLog("here", 0, uuid_to_str(here)), LocalLog("here", 1, uuid_to_str(here)),
                                         LocalLog("again", 0, uuid_to_str(old))])
    assert [(s.topic, s.partition) for s in found] == [("here", 1), ("again", 0)]


def test_an_empty_image_calls_everything_stray():
    """Why the sweep waits for the image to catch up: at offset 0 every log looks stray."""
    image = MetadataImage()
    logs = [LocalLog("t", 0, uuid_to_str(random_uuid())), LocalLog("u", 3, uuid_to_str(random_uuid()))]
    assert len(find_stray_logs(ME, image, logs)) == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sets(st.integers(1, 4), min_size=1, max_size=3), min_size=1, max_size=4),
                          st.booleans()), min_size=1, max_size=5), st.data())
def test_a_replica_of_this_broker_is_never_stray(topics, data):
    image = MetadataImage()
    ids = []
    for i, (assignment, _) in enumerate(topics):
        ids.append(_topic(image, f"t{i}", [sorted(r) for r in assignment]))
    logs = []
    for i, (assignment, recreated) in enumerate(topics):
        for p in range(len(assignment) + 1):
            tid = random_uuid() if recreated and data.draw(st.booleans()) else ids[i]
            logs.append(LocalLog(f"t{i}", p, uuid_to_str(tid)))
    strays = {(s.topic, s.partition) for s in find_stray_logs(ME, image, logs)}
    for lg in logs:
        t = image.topics_by_name[lg.topic]
        st_ = t.partitions.get(lg.partition)
        mine = st_ is not None and ME in st_.replicas and uuid_to_str(t.topic_id) == lg.topic_id
        assert ((lg.topic, lg.partition) in strays) == (not mine), lg


# -- the sweep over real logs ------------------------------------------------------------------

def _write(lm, topic, p, tid, n):
    plog = lm.get_or_create(topic, p, topic_id=uuid_to_str(tid))
    b = BatchBuilder(0)
    for i in range(n):
        b.append(value=f"{topic}-{p}-{i}".encode(), timestamp=1000 + i)
    plog.append(bytearray(b.build()), 0)
    return plog.dir


def _manager(lm, image):
    return ReplicaManager(ME, lm, image, lambda topic: LogConfig(), lambda: 1000)


def test_sweep_after_catch_up_moves_strays_aside_and_keeps_replicas(tmp_path):
    d = str(tmp_path / "logs")
    lm = LogManager([d], LogConfig())
    keep, moved, old, gone = random_uuid(), random_uuid(), random_uuid(), random_uuid()
    _write(lm, "keep", 0, keep, 5)
    _write(lm, "keep", 1, keep, 3)      # reassigned away while this broker was down
    _write(lm, "again", 0, old, 4)      # deleted and re-created while down; still a replica here
    _write(lm, "gone", 0, gone, 2)      # deleted while down
    lm.shutdown()

    lm = LogManager([d], LogConfig())
    image = MetadataImage()               # the restarted broker's image, not caught up yet
    rm = _manager(lm, image)
    rm.load_from_image(image)
    assert rm.caught_up is False and sorted(os.listdir(d)).count("keep-1") == 1
    # the metadata arrives: applied to the image before the manager listened (a snapshot)
    _topic(image, "keep", [[1, 2], [1, 3]], keep)
    image.apply(PartitionChangeRecord(partition_id=1, topic_id=keep, replicas=[2, 3], isr=[2, 3], leader=2))
    image.apply(TopicRecord(name="gone", topic_id=gone))
    image.apply(RemoveTopicRecord(topic_id=gone))
    new = _topic(image, "again", [[1, 2]])
    # the records a live manager sees before catch-up: the re-created topic waits
    rm.load_from_image(image)
    assert rm.get("again", 0) is None and lm.get("again", 0).topic_id == uuid_to_str(old)
    assert rm.get("keep", 0) is not None

    strays = rm.sweep_stray_logs()
    assert sorted((s.topic, s.partition) for s in strays) == [("again", 0), ("gone", 0), ("keep", 1)]
    names = sorted(os.listdir(d))
    assert "keep-0" in names and "keep-1" not in names and "gone-0" not in names
    assert sum(n.startswith("keep-1.") and n.endswith("-stray") for n in names) == 1   # moved aside, kept
    assert sum(n.startswith("gone-0.") and n.endswith("-stray") for n in names) == 1
    assert sum(n.startswith("again-0.") and n.endswith("-stray") for n in names) == 1
    # the replica is intact and readable
    assert rm.get("keep", 0).log.log_end_offset == 5
    # the re-created topic's replica is a fresh log with the new id
    again = rm.get("again", 0)
    assert again is not None and again.log.log_end_offset == 0 and again.log.topic_id == uuid_to_str(new)
    assert not rm.sweep_stray_logs()          # nothing left
    lm.shutdown()
    # -stray dirs are skipped at the next start
    lm = LogManager([d], LogConfig())
    assert sorted(lm.logs()) == [("again", 0), ("keep", 0)]
    lm.shutdown()


def test_sweep_never_touches_open_partitions_nor_the_metadata_log(tmp_path):
    d = str(tmp_path / "logs")
    lm = LogManager([d], LogConfig())
    tid = random_uuid()
    _write(lm, "t", 0, tid, 3)
    lm.get_or_create("__cluster_metadata", 0)       # no topic id, in the same log dir
    image = MetadataImage()
    _topic(image, "t", [[1]], tid)
    rm = _manager(lm, image)
    rm.load_from_image(image)
    part = rm.get("t", 0)
    assert part is not None
    assert rm.sweep_stray_logs() == []
    assert rm.get("t", 0) is part and lm.get("__cluster_metadata", 0) is not None
    lm.shutdown()
