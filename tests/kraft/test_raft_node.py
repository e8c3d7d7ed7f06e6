"""Targeted RaftNode behaviours, driven by the simulation's loop (fake clock, seeded)."""

import random

from kbroker.kraft.quorum_store import MemoryQuorumStore
from kbroker.kraft.raft import FOLLOWER, LEADER, NotLeaderError, RaftConfig, RaftNode
from kbroker.kraft.raft_log import MemoryRaftLog
from kbroker.kraft.snapshots import MemorySnapshotStore
from kbroker.kraft.transport import Envelope
from kbroker.wire.errors import Errors
from kbroker.wire.generated.add_raft_voter_request import AddRaftVoterRequest
from tests.sim.raft_sim import ADMIN, CONFIG, QUIET, Sim

import pytest


def stable(seed=1, voters=3, observers=1):
    # (flushes at once: these tests poll the nodes by hand and expect a poll's flush done)
    sim = Sim(QUIET, seed, voters=voters, observers=observers, later_flushes=False)
    sim.run(end_ms=600, final=False)
    lead = sim.current_leader()
    assert lead is not None and sim.live()
    return sim, lead


@pytest.mark.parametrize("seed", range(5))
def test_prevote_keeps_a_healed_follower_from_deposing_the_leader(seed):
    sim, lead = stable(seed)
    epoch = sim.nodes[lead].node.epoch
    victim = next(v for v in sorted(sim.static_voters) if v != lead)
    sim.net.isolate(victim, sim.nodes)
    sim.run(end_ms=sim.t + 20 * CONFIG["election_timeout_ms"], final=False)
    v = sim.nodes[victim].node
    assert v.epoch == epoch, "an isolated node must not bump its epoch (pre-vote fails)"
    sim.net.heal_all()
    sim.run(end_ms=sim.t + 10 * CONFIG["fetch_timeout_ms"], final=False)
    assert sim.current_leader() == lead and sim.nodes[lead].node.epoch == epoch
    assert v.role == FOLLOWER and v.leader_id == lead and v.epoch == epoch


@pytest.mark.parametrize("seed", range(5))
def test_resigning_leader_hands_over_before_a_fetch_timeout(seed):
    sim, lead = stable(seed)
    t0 = sim.t
    sim.nodes[lead].node.resign(sim.nodes[lead].local(sim.t))
    sim.nodes[lead].deadline = sim.t
    while sim.t < t0 + CONFIG["fetch_timeout_ms"]:
        sim.run(end_ms=sim.t + 5, final=False)
        new = sim.current_leader()
        if new is not None and new != lead:
            break
    assert new is not None and new != lead, "no successor within one fetch timeout"


def test_observer_replicates_and_never_votes():
    sim, lead = stable(3, observers=2)
    sim.run(end_ms=sim.t + 300, final=False)
    for o in (100, 101):
        n = sim.nodes[o].node
        assert not n.is_voter and n.role == FOLLOWER and n.leader_id == lead
        assert n.high_watermark > 0 and sim.nodes[o].values == [v for _e, v in sim.committed[:n.high_watermark] if v]
    assert all(v not in (100, 101) for v in sim.leaders.values())


def test_single_voter_elects_itself_and_commits():
    node = RaftNode(1, MemoryRaftLog(), MemoryQuorumStore(), MemorySnapshotStore(), RaftConfig(),
                    random.Random(0), voters={1}, now_ms=0)
    with pytest.raises(NotLeaderError):
        node.append([b"x"], 0)
    node.poll(0, [])                     # the only voter stands at once
    assert node.role == LEADER and node.epoch == 1 and node.store.read().epoch == 1
    off = node.append([b"a", b"b"], 10)
    node.poll(10, [])
    assert node.high_watermark == off + 1
    batches = node.take_committed()
    assert batches[-1].records == [b"a", b"b"] and batches[0].is_control    # LeaderChange first


def test_vote_is_persisted_before_it_is_granted():
    store = MemoryQuorumStore()
    node = RaftNode(2, MemoryRaftLog(), store, MemorySnapshotStore(), RaftConfig(), random.Random(0),
                    voters={1, 2, 3}, now_ms=0)
    from kbroker.wire.generated.vote_request import VoteRequest
    P = VoteRequest.TopicData.PartitionData
    req = VoteRequest(topics=[VoteRequest.TopicData(topic_name="__cluster_metadata", partitions=[
        P(candidate_epoch=1, candidate_id=1, last_offset_epoch=0, last_offset=0)])])
    out, _ = node.poll(10, [Envelope(1, 2, 5, req)])
    part = out[0].msg.topics[0].partitions[0]
    assert part.vote_granted and store.read().voted_id == 1 and store.read().epoch == 1
    # a second candidate in the same epoch is refused
    req.topics[0].partitions[0].candidate_id = 3
    out, _ = node.poll(11, [Envelope(3, 2, 6, req)])
    assert not out[0].msg.topics[0].partitions[0].vote_granted


def test_static_voters_refuse_add_raft_voter():
    sim, lead = stable(2)
    sim.net.send(Envelope(ADMIN, lead, 1, AddRaftVoterRequest(voter_id=100, listeners=[])), sim.t)
    sim.run(end_ms=sim.t + 50, final=False)
    assert sim.stats[f"admin_AddRaftVoterResponse{int(Errors.UNSUPPORTED_VERSION)}"] == 1


def test_fetch_answers_name_the_leaders_address_from_its_voters_record():
    from kbroker.kraft.snapshots import write_bootstrap_checkpoint
    from kbroker.wire.generated.fetch_request import FetchRequest
    from kbroker.wire.generated.voters_record import VotersRecord
    snaps = MemorySnapshotStore()
    write_bootstrap_checkpoint(snaps, VotersRecord(voters=[VotersRecord.Voter(voter_id=1, endpoints=[
        VotersRecord.Voter.Endpoint(name="CONTROLLER", host="127.0.0.9", port=9093)])]))
    node = RaftNode(1, MemoryRaftLog(), MemoryQuorumStore(), snaps, RaftConfig(), random.Random(0), now_ms=0)
    node.poll(0, [])
    assert node.role == LEADER and node.voters == {1} and node.kraft_version == 1
    P = FetchRequest.FetchTopic.FetchPartition
    req = FetchRequest(replica_id=50, topics=[FetchRequest.FetchTopic(
        topic="__cluster_metadata", partitions=[P(current_leader_epoch=0, fetch_offset=0)])])
    out, _ = node.poll(1, [Envelope(50, 1, 3, req)])         # an observer with an old epoch
    resp = out[0].msg
    assert resp.responses[0].partitions[0].error_code == int(Errors.FENCED_LEADER_EPOCH)
    assert [(e.node_id, e.host, e.port) for e in resp.node_endpoints] == [(1, "127.0.0.9", 9093)]
    # the public view of the voter set carries the VotersRecord entry (its endpoints)
    entry = node.voter_entries[1]
    assert list(node.voter_entries) == [1] and [(e.host, e.port) for e in entry.endpoints] == [("127.0.0.9", 9093)]
    node.voter_entries.clear()                                # a copy: Raft's own set is untouched
    assert node.voters == {1}


def test_epoch_start_offset_is_where_the_new_leaders_epoch_begins():
    log, store = MemoryRaftLog(), MemoryQuorumStore()
    node = RaftNode(1, log, store, MemorySnapshotStore(), RaftConfig(), random.Random(0), voters={1}, now_ms=0)
    assert node.epoch_start_offset == 0 and node.voter_entries == {1: None}   # static voters: no entry
    node.poll(0, [])
    node.append([b"a", b"b"], 1)
    node.poll(1, [])
    end = node.log_end_offset
    assert end > 2
    # restarted on the same log: epoch 2 starts at the old log end, its LeaderChange batch there
    again = RaftNode(1, log, store, MemorySnapshotStore(), RaftConfig(), random.Random(0), voters={1}, now_ms=5)
    again.poll(5, [])
    assert again.role == LEADER and again.epoch == 2 and again.epoch_start_offset == end
    first = [b for b in again.take_committed() if b.base_offset >= end][0]
    assert first.base_offset == end and first.is_control


def test_a_parked_fetch_keeps_its_partition_byte_limit():
    """A Fetch that waited for data is answered within partition_max_bytes too (one batch when
    the limit is smaller than a batch), as an unparked one is."""
    from kbroker.kraft.raft_log import METADATA_TOPIC
    from kbroker.wire.generated.fetch_request import FetchRequest
    from kbroker.wire.records import iter_batches
    sim, lead = stable(2)
    n = sim.nodes[lead]
    node, now = n.node, n.local(sim.t)
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=node.epoch, fetch_offset=node.log.end_offset,
        last_fetched_epoch=node.log.last_epoch, log_start_offset=0, partition_max_bytes=1)
    req = FetchRequest(replica_id=100, replica_state=FetchRequest.ReplicaState(replica_id=100, replica_epoch=-1),
                       max_wait_ms=10_000, min_bytes=0, max_bytes=1 << 20,
                       topics=[FetchRequest.FetchTopic(topic=METADATA_TOPIC, partitions=[part])])
    out, _ = node.poll(now, [Envelope(100, lead, 777, req)])
    assert not [e for e in out if e.corr == 777], "the fetch had nothing new: it must wait"
    node.append([b"a"], now)
    node.append([b"b"], now)
    out, _ = node.poll(now + 1, [])
    (answer,) = [e for e in out if e.corr == 777 and e.dst == 100]
    records = answer.msg.responses[0].partitions[0].records
    assert len(list(iter_batches(records))) == 1


def test_a_fetch_that_moves_the_high_watermark_is_answered_at_once():
    """The fetch that completes a majority is not parked: its sender learns the commit now, not
    a fetch max wait later (a broker's new leaderships wait on that; Kafka 4.1 does the same)."""
    from kbroker.kraft.raft_log import METADATA_TOPIC
    from kbroker.wire.generated.fetch_request import FetchRequest
    sim, lead = stable(4, observers=0)
    n = sim.nodes[lead]
    node, now = n.node, n.local(sim.t)
    voter = next(v for v in sorted(sim.static_voters) if v != lead)
    node.append([b"a"], now)
    node.poll(now, [])                      # (the leader's own append is flushed)
    hw, end = node.high_watermark, node.log.end_offset
    assert hw < end
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=node.epoch, fetch_offset=end,
        last_fetched_epoch=node.log.last_epoch, log_start_offset=0, partition_max_bytes=1 << 20)
    req = FetchRequest(replica_id=voter, replica_state=FetchRequest.ReplicaState(replica_id=voter, replica_epoch=-1),
                       max_wait_ms=10_000, min_bytes=0, max_bytes=1 << 20,
                       topics=[FetchRequest.FetchTopic(topic=METADATA_TOPIC, partitions=[part])])
    out, _ = node.poll(now + 1, [Envelope(voter, lead, 778, req)])
    assert node.high_watermark == end
    (answer,) = [e for e in out if e.corr == 778 and e.dst == voter]
    assert answer.msg.responses[0].partitions[0].high_watermark == end
    # nothing new after that: the next fetch waits
    out, _ = node.poll(now + 2, [Envelope(voter, lead, 779, req)])
    assert not [e for e in out if e.corr == 779]


def test_raft_config_from_the_broker_config_keeps_every_value_including_zero():
    from kbroker.config import BrokerConfig
    cfg = BrokerConfig({"node.id": "1", "process.roles": "broker,controller",
                        "controller.quorum.election.timeout.ms": "1500",
                        "controller.quorum.fetch.timeout.ms": "2500",
                        "controller.quorum.election.backoff.max.ms": "700",
                        "controller.quorum.request.timeout.ms": "3000",
                        "controller.quorum.retry.backoff.ms": "0"})
    rc = RaftConfig.from_kafka(cfg)
    assert (rc.election_timeout_ms, rc.fetch_timeout_ms, rc.election_backoff_max_ms,
            rc.request_timeout_ms, rc.retry_backoff_ms) == (1500, 2500, 700, 3000, 0)
    assert RaftConfig.from_kafka(BrokerConfig({"node.id": "1", "process.roles": "controller"})).retry_backoff_ms == 20
