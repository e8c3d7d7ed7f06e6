"""The leader's side of a follower's fetch reads its partitions in one go: with records on
thousands of them that held the loop as a consumer's did. Reads stop after READ_WHOLE_S, as
at the byte budget; the rest answer their offsets without records and come next fetch."""

from kbroker import slices
from kbroker.replication.roles import apply_partition_state
from kbroker.wire.errors import Errors
from kbroker.wire.generated.fetch_request import FetchRequest
from tests.handlers.test_handlers import batch, create, produce
from tests.handlers.test_long_poll_wakeup import _start

FOLLOWER = 2
N = 6


def _follower_fetch(broker, offsets, epochs, tid):
    T = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_state=FetchRequest.ReplicaState(replica_id=FOLLOWER, replica_epoch=-1),
        max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
        topics=[T(topic="rw", topic_id=tid, partitions=[T.FetchPartition(
            partition=p, fetch_offset=o, current_leader_epoch=epochs[p], partition_max_bytes=1 << 20)
            for p, o in offsets.items()])],
        forgotten_topics_data=[])
    return _start(broker, 1, 15, req).responses[0].partitions


def test_follower_reads_stop_after_their_time_and_the_rest_come_next(broker, monkeypatch):
    create(broker, "rw", N)
    server = broker.server
    me = server.node_id
    epochs = {}
    for p in range(N):
        produce(broker, "rw", p, batch(3), acks=1)
        part = server.replicas.get("rw", p)
        apply_partition_state(part, me, me, part.leader_epoch + 1, part.partition_epoch + 1,
                              [me, FOLLOWER], [me], server.clock.now_ms())
        epochs[p] = part.leader_epoch
    tid = server.image.topics_by_name["rw"].topic_id
    monkeypatch.setattr(slices, "READ_WHOLE_S", 0.0)     # (time's up after the first read)
    offsets = {p: 0 for p in range(N)}
    for fetch in range(N):
        parts = _follower_fetch(broker, offsets, epochs, tid)
        assert all(pd.error_code == Errors.NONE and pd.high_watermark >= 0 for pd in parts)
        got = [pd.partition_index for pd in parts if pd.records and pd.records.size]
        assert len(got) == 1 and offsets[got[0]] == 0, (fetch, got)
        offsets[got[0]] = 3
    assert all(o == 3 for o in offsets.values())
    monkeypatch.setattr(slices, "READ_WHOLE_S", 10.0)
    offsets = {p: 0 for p in range(N)}
    parts = _follower_fetch(broker, offsets, epochs, tid)
    assert all(pd.records and pd.records.size for pd in parts)   # all at once within the time
