import asyncio

from kbroker.clock import FakeClock
from kbroker.kraft.controller import Controller, NewTopic
from kbroker.kraft.image import MetadataImage
from kbroker.kraft.runtime import ControllerRuntime, MetadataLog, QuorumState
from kbroker.log.config import LogConfig
from kbroker.log.partition_log import PartitionLog

DEFAULTS = {"num.partitions": 1, "default.replication.factor": 1, "delete.topic.enable": True}


def open_runtime(path, clock):
    plog = PartitionLog.open(str(path / "__cluster_metadata-0"), LogConfig(), clock.now_ms())
    rt = ControllerRuntime(Controller(1, DEFAULTS), MetadataImage(), MetadataLog(plog),
                           QuorumState(str(path / "quorum-state"), 1), clock.now_ms)
    return rt, plog


def test_metadata_log_replay_after_restart(tmp_path):
    clock = FakeClock()
    rt, plog = open_runtime(tmp_path, clock)
    assert rt.replay() == 0
    assert rt.elect() == 1
    published = []
    rt.publishers.append(lambda rec, change, off: published.append((type(rec).__name__, off)))
    rt.submit_now(lambda c, now: c.bootstrap(now))
    rt.submit_now(lambda c, now: c.register_broker(1, __import__("uuid").uuid4(), [("PLAINTEXT", "h", 1, 0)], None, now))
    res = asyncio.run(rt.submit(lambda c, now: c.create_topics([NewTopic("t", num_partitions=2)], False, now)))
    assert res[0].error == 0
    assert ("TopicRecord", 3) in published and published[-1][0] == "PartitionRecord"
    # one batch per operation, partition leader epoch = the quorum epoch
    batches = list(plog.batches())
    assert [b.records_count for b in batches] == [1, 2, 3]
    assert {b.partition_leader_epoch for b in batches} == {1}
    plog.close()

    rt2, plog2 = open_runtime(tmp_path, clock)
    assert rt2.replay() == 6
    assert rt2.elect() == 2
    assert rt2.image.topics_by_name["t"].topic_id == res[0].topic_id
    assert rt2.controller.next_offset == 6
    # the controller's view is rebuilt too: creating "t" again fails
    again = rt2.submit_now(lambda c, now: c.create_topics([NewTopic("t")], False, now))
    assert again[0].error != 0
    plog2.close()
