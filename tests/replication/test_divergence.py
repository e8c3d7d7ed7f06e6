"""The divergent-log cases of KIP-101 and KIP-279, step by step: leaders change while
followers hold records that were never committed; every replica ends with the new leader's
log, nothing committed is lost and no high watermark goes back."""

import uuid

from kbroker.replication.fetcher import ReplicaFetcher
from kbroker.replication.leader_state import answer_replica_fetch
from kbroker.replication.roles import RoleChange, apply_partition_state
from kbroker.wire.generated.fetch_response import FetchResponse

from tests.replication.memlog import MemReplica

TID = uuid.UUID(int=1)
PD = FetchResponse.FetchableTopicResponse.PartitionData


class Cluster:
    def __init__(self, ids=(1, 2, 3)):
        self.ids = list(ids)
        self.r = {i: MemReplica(i) for i in ids}
        self.epoch = -1
        self.partition_epoch = -1
        self.now = 0

    def elect(self, leader, isr, alive=None):
        """The controller names ``leader`` (a new leader epoch); ``alive`` learn it."""
        self.epoch += 1
        self.partition_epoch += 1
        self.isr = list(isr)
        for i in alive if alive is not None else self.ids:
            ch = apply_partition_state(self.r[i], i, leader, self.epoch, self.partition_epoch,
                                       self.ids, isr, self.now)
            assert ch in (RoleChange.BECAME_LEADER, RoleChange.BECAME_FOLLOWER)
        self.leader = leader

    def write(self, *values, on=None):
        r = self.r[on or self.leader]
        for v in values:
            r.append_as_leader(v)
        r.advance_high_watermark(r.leader_state.high_watermark(r.log_end_offset))

    def fetch(self, follower, rounds=1, max_records=100):
        """``rounds`` synchronous Fetch round trips from ``follower`` to the leader."""
        lead = self.r[self.leader]
        f = ReplicaFetcher(follower, self.leader)
        f.add("t", 0, TID, self.epoch, self.r[follower])
        for _ in range(rounds):
            self.now += 10
            req = f.build_request(self.now)
            fp = req.topics[0].partitions[0]
            ans = answer_replica_fetch(lead.leader_state, lead, follower, fp.current_leader_epoch,
                                       fp.fetch_offset, fp.last_fetched_epoch, 1, self.now)
            pd = PD(partition_index=0, error_code=ans.error, high_watermark=ans.high_watermark,
                    log_start_offset=0)
            if ans.diverging is not None:
                pd.diverging_epoch = PD.EpochEndOffset(epoch=ans.diverging[0], end_offset=ans.diverging[1])
            elif ans.read_offset >= 0:
                pd.records = lead.read(ans.read_offset, max_records) or None
            self.appended = f.handle_response(req, FetchResponse(responses=[
                FetchResponse.FetchableTopicResponse(topic="t", partitions=[pd])]), self.now)
        return f

    def values(self, i):
        return self.r[i].values()


def test_an_answer_names_the_partitions_it_appended_to():
    # the driver waits for these partitions' fsyncs (flush.messages) before its next Fetch
    c = Cluster((1, 2))
    c.elect(1, [1, 2])
    c.write("m1")
    c.fetch(2)
    assert [fp.replica for fp in c.appended] == [c.r[2]]
    c.fetch(2)                       # nothing new: nothing appended
    assert c.appended == []


def test_kip101_follower_keeps_a_committed_record_its_high_watermark_had_not_reached():
    # A leads; B has m1, m2 but its HW says 1 (the HW arrives a fetch later). Old Kafka
    # truncated B to its HW on restart, then B led without m2 although m2 was acknowledged.
    c = Cluster((1, 2))
    c.elect(1, [1, 2])
    c.write("m1", "m2")
    c.fetch(2)                       # B gets m1, m2; the leader's HW moves after this fetch
    assert c.r[1].hw == 0 and c.values(2) == ["m1", "m2"]
    c.fetch(2)                       # A learns B has both: m2 committed (acks=all answered)
    assert c.r[1].hw == 2
    # B restarts (no truncation to its HW), A dies; B leads.
    c.elect(2, [2], alive=[2])
    assert c.values(2) == ["m1", "m2"]


def test_kip101_divergent_uncommitted_tail_is_replaced_by_the_new_leaders_log():
    # A (epoch 0) wrote m1, m2; B fetched only m1. Both crash; B comes back first and leads
    # epoch 1, writing m3 at offset 1. A returns as follower: its m2 must give way to m3.
    c = Cluster((1, 2))
    c.elect(1, [1, 2])
    c.write("m1")
    c.fetch(2, max_records=1)
    c.write("m2")
    c.elect(2, [2], alive=[2])
    c.write("m3")
    apply_partition_state(c.r[1], 1, 2, c.epoch, c.partition_epoch, c.ids, [2], c.now)
    f = c.fetch(1, rounds=3)
    assert c.values(1) == c.values(2) == ["m1", "m3"]
    assert [t.offset for t in f.truncations] == [1]
    assert c.r[1].cache.entries == c.r[2].cache.entries


def test_kip279_follower_of_a_deposed_leader_truncates_before_the_new_leader_writes():
    # A (epoch 0) wrote m2 uncommitted; B fetched it; C did not. A dies, C leads (epoch 1)
    # and has written nothing yet. B must not keep m2 as if C had it.
    c = Cluster()
    c.elect(1, [1, 2, 3])
    c.write("m1")
    c.fetch(2), c.fetch(3), c.fetch(2), c.fetch(3)
    c.write("m2")
    c.fetch(2)
    assert c.values(2) == ["m1", "m2"] and c.values(3) == ["m1"]
    c.elect(3, [2, 3], alive=[2, 3])
    c.fetch(2, rounds=2)
    assert c.values(2) == ["m1"]
    c.write("m3")
    c.fetch(2, rounds=2)
    assert c.values(2) == c.values(3) == ["m1", "m3"]


def test_kip279_several_leader_changes_truncate_in_rounds():
    # Epochs 0..3 with uncommitted tails left on different replicas: the follower needs more
    # than one diverging-epoch round to find where its log and the leader's agree.
    c = Cluster()
    c.elect(1, [1, 2, 3])
    c.write("a")
    for i in (2, 3, 2, 3):
        c.fetch(i)
    c.write("b1", "b2")
    c.fetch(2)                                   # B: a b1 b2 (epoch 0)
    c.elect(2, [2, 3], alive=[2, 3])             # epoch 1: B leads, writes c1 (uncommitted)
    c.write("c1")
    c.elect(3, [3], alive=[3])                   # epoch 2: C leads with only "a"
    c.write("d1", "d2", "d3")
    c.elect(3, [3], alive=[3])                   # epoch 3, same leader
    c.write("e1")
    apply_partition_state(c.r[2], 2, 3, c.epoch, c.partition_epoch, c.ids, [3], c.now)
    apply_partition_state(c.r[1], 1, 3, c.epoch, c.partition_epoch, c.ids, [3], c.now)
    for i in (1, 2):
        c.fetch(i, rounds=5)
    assert c.values(1) == c.values(2) == c.values(3) == ["a", "d1", "d2", "d3", "e1"]
    for i in (1, 2):
        assert c.r[i].cache.entries == c.r[3].cache.entries


def test_leader_high_watermark_waits_for_followers_it_has_not_heard_from():
    c = Cluster()
    c.elect(1, [1, 2, 3])
    c.write("x", "y")
    assert c.r[1].hw == 0
    c.fetch(2, rounds=2)
    assert c.r[1].hw == 0            # 3 is in the ISR and has not fetched
    c.fetch(3, rounds=2)
    assert c.r[1].hw == 2
    c.fetch(2)
    assert c.r[2].hw == 2            # followers learn it from the next answer
