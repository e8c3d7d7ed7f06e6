"""RaftDriver with real asyncio over the in-memory network (no sockets)."""

import asyncio
import random

import pytest

from kbroker.kraft.driver import RaftDriver
from kbroker.kraft.quorum_store import MemoryQuorumStore
from kbroker.kraft.raft import LEADER, CommittedBatch, NotLeaderError, RaftConfig, RaftNode
from kbroker.kraft.raft_log import MemoryRaftLog
from kbroker.kraft.snapshots import MemorySnapshotStore
from kbroker.clock import SYSTEM_CLOCK
from kbroker.kraft.transport import Faults, MemoryNetwork, run_memory_network

monotonic_ms = SYSTEM_CLOCK.monotonic_ms
from kbroker.wire.generated.describe_quorum_request import DescribeQuorumRequest

CFG = dict(election_timeout_ms=150, fetch_timeout_ms=300, request_timeout_ms=200,
           fetch_max_wait_ms=100, election_backoff_max_ms=100)


async def wait_for(cond, timeout=10.0):
    end = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < end, "condition not reached"
        await asyncio.sleep(0.005)


def make_cluster(ids, seed=1):
    net = MemoryNetwork(random.Random(seed), Faults(min_delay_ms=0, max_delay_ms=2), clock=monotonic_ms)
    drivers = {}
    for i in ids:
        node = RaftNode(i, MemoryRaftLog(), MemoryQuorumStore(), MemorySnapshotStore(),
                        RaftConfig(**CFG), random.Random(seed * 100 + i), voters=set(ids),
                        now_ms=monotonic_ms())
        drivers[i] = RaftDriver(node, net.endpoint(i))
    return net, drivers


def leader_of(drivers):
    leaders = [d for d in drivers.values() if d.node.role == LEADER and d._task is not None]
    return leaders[0] if len(leaders) == 1 else None


@pytest.mark.timeout(60)
def test_three_drivers_elect_commit_and_hand_over():
    async def main():
        net, drivers = make_cluster([1, 2, 3])
        pump = asyncio.create_task(run_memory_network(net))
        seen = {i: [] for i in drivers}
        for i, d in drivers.items():
            d.add_listener(lambda item, i=i: seen[i].extend(
                r for r in getattr(item, "records", []) if isinstance(item, CommittedBatch)))
            d.start()
        await wait_for(lambda: leader_of(drivers) is not None)
        lead = leader_of(drivers)
        offs = [await lead.append([b"r%d" % k]) for k in range(5)]
        assert offs == sorted(offs) and lead.node.high_watermark > offs[-1]
        await wait_for(lambda: all(len(s) == 5 for s in seen.values()))
        assert all(s == [b"r%d" % k for k in range(5)] for s in seen.values())
        # DescribeQuorum through handle_request
        resp = await lead.handle_request(-1, DescribeQuorumRequest(topics=[]))
        part = resp.topics[0].partitions[0]
        assert part.error_code == 0 and part.leader_id == lead.node.node_id
        assert sorted(v.replica_id for v in part.current_voters) == [1, 2, 3]
        # clean shutdown hands leadership over without waiting for a fetch timeout
        old = lead.node.node_id
        sent, send = [], lead.transport.send
        lead.transport.send = lambda env: (sent.append(type(env.msg).__name__), send(env))
        await lead.close()
        assert "EndQuorumEpochRequest" in sent, "close() stopped before the hand-over went out"
        rest = {i: d for i, d in drivers.items() if i != old}
        await wait_for(lambda: leader_of(rest) is not None)
        new = leader_of(rest)
        await new.append([b"after"])
        for d in rest.values():
            await d.close()
        pump.cancel()
    asyncio.run(main())


def disk_cluster(tmp_path, ids, voters, seed=2):
    from kbroker.kraft.driver import open_node_on_disk
    net = MemoryNetwork(random.Random(seed), Faults(min_delay_ms=0, max_delay_ms=2), clock=monotonic_ms)
    drivers = {}
    for i in ids:
        node = open_node_on_disk(str(tmp_path / f"n{i}"), i, RaftConfig(**CFG), voters=voters,
                                 cluster_id="c1", now_ms=monotonic_ms(), rng=random.Random(seed + i))
        drivers[i] = RaftDriver(node, net.endpoint(i))
    return net, drivers


@pytest.mark.timeout(90)
def test_on_disk_restart_snapshot_and_catch_up(tmp_path):
    """Three nodes on disk: commit, snapshot + clean the log on the leader, restart a node that
    missed it all; it catches up from the snapshot (FetchSnapshot) and the log."""
    async def main():
        net, drivers = disk_cluster(tmp_path, [1, 2, 3], {1, 2, 3})
        pump = asyncio.create_task(run_memory_network(net))
        states = {i: [] for i in drivers}
        applied = {}

        def listener(i):
            def on(item):
                if isinstance(item, CommittedBatch):
                    states[i].extend(item.records)
                    applied[i] = item.last_offset + 1
                else:                                  # SnapshotLoaded
                    states[i][:] = list(item.records)
                    applied[i] = item.snapshot_id.end_offset
            return on
        for i, d in drivers.items():
            d.add_listener(listener(i))
            d.start()
        await wait_for(lambda: leader_of(drivers) is not None)
        lead = leader_of(drivers)
        lagger = next(i for i in drivers if i != lead.node.node_id)
        await drivers[lagger].close()
        net.set_down(lagger, True)
        for k in range(30):
            await lead.append([b"value-%02d" % k])
            if k % 10 == 9:              # the state machines of the nodes up snapshot now and then
                hw = lead.node.high_watermark
                for i, d in drivers.items():
                    if i != lagger:
                        await wait_for(lambda: applied.get(i, 0) >= hw)
                        d.node.create_snapshot(applied[i], list(states[i]), monotonic_ms())
        assert all(d.node.log.start_offset > 0 for i, d in drivers.items() if i != lagger)
        files = sorted(p.name for p in (tmp_path / f"n{lead.node.node_id}" / "__cluster_metadata-0").iterdir()
                       if p.name.endswith(".checkpoint") and "-" in p.name[:21])
        assert files, "no <offset>-<epoch>.checkpoint written"
        for d in drivers.values():
            await d.close()
        for d in drivers.values():
            d.node.log.close()
        net.set_down(lagger, False)
        # everyone restarts from disk
        net2, drivers2 = disk_cluster(tmp_path, [1, 2, 3], {1, 2, 3}, seed=5)
        pump.cancel()
        pump = asyncio.create_task(run_memory_network(net2))
        states.update({i: [] for i in drivers2})
        for i, d in drivers2.items():
            d.add_listener(listener(i))
            d.start()
        await wait_for(lambda: leader_of(drivers2) is not None)
        await leader_of(drivers2).append([b"after-restart"])
        want = [b"value-%02d" % k for k in range(30)] + [b"after-restart"]
        await wait_for(lambda: all(s == want for s in states.values()), timeout=20)
        assert drivers2[lagger].node.log.start_offset > 0        # it was sent the snapshot
        for d in drivers2.values():
            await d.close()
            d.node.log.close()
        pump.cancel()
    asyncio.run(main())


@pytest.mark.timeout(90)
def test_standalone_voter_grows_to_two_with_add_raft_voter(tmp_path):
    from kbroker.kraft.snapshots import DirSnapshotStore, write_bootstrap_checkpoint
    from kbroker.wire.generated.add_raft_voter_request import AddRaftVoterRequest
    from kbroker.wire.generated.remove_raft_voter_request import RemoveRaftVoterRequest
    from kbroker.wire.generated.voters_record import VotersRecord

    for i in (1, 2):   # format --standalone on node 1; node 2 is formatted with the same voter set
        store = DirSnapshotStore(str(tmp_path / f"n{i}" / "__cluster_metadata-0"))
        write_bootstrap_checkpoint(store, VotersRecord(voters=[VotersRecord.Voter(voter_id=1, endpoints=[])]))

    async def main():
        net, drivers = disk_cluster(tmp_path, [1, 2], None)
        pump = asyncio.create_task(run_memory_network(net))
        for d in drivers.values():
            d.start()
        await wait_for(lambda: drivers[1].node.role == LEADER)
        await drivers[1].append([b"x"])
        await wait_for(lambda: drivers[2].node.high_watermark >= drivers[1].node.high_watermark)
        resp = await drivers[1].handle_request(-1, AddRaftVoterRequest(
            cluster_id="c1", voter_id=2, timeout_ms=2000, listeners=[]))
        assert resp.error_code == 0
        assert drivers[1].node.voters == {1, 2}
        await wait_for(lambda: drivers[2].node.voters == {1, 2})
        again = await drivers[1].handle_request(-1, AddRaftVoterRequest(cluster_id="c1", voter_id=2, listeners=[]))
        assert again.error_code == 126                      # DUPLICATE_VOTER
        await drivers[1].append([b"y"])                    # commits with two voters now
        resp = await drivers[1].handle_request(-1, RemoveRaftVoterRequest(cluster_id="c1", voter_id=2))
        assert resp.error_code == 0 and drivers[1].node.voters == {1}
        for d in drivers.values():
            await d.close()
            d.node.log.close()
        pump.cancel()
    asyncio.run(main())


@pytest.mark.timeout(30)
def test_requests_after_close_are_refused_not_left_waiting():
    """A peer's Vote or Fetch that arrives while the node shuts down must get an answer (an
    error) at once: a waiter nobody polls for would hold the connection's drain forever."""
    async def main():
        net, drivers = make_cluster([1, 2, 3])
        pump = asyncio.create_task(run_memory_network(net))
        for d in drivers.values():
            d.start()
        await wait_for(lambda: leader_of(drivers) is not None)
        d = drivers[1]
        await d.close()
        Req = DescribeQuorumRequest
        req = Req(topics=[Req.TopicData(topic_name="__cluster_metadata",
                                        partitions=[Req.TopicData.PartitionData(partition_index=0)])])
        with pytest.raises(NotLeaderError):
            await asyncio.wait_for(d.handle_request(2, req), 2)
        with pytest.raises(NotLeaderError):
            await asyncio.wait_for(d.append([b"x"]), 2)
        for other in (2, 3):
            await drivers[other].close()
        pump.cancel()
    asyncio.run(main())
