"""RaftDriver with real asyncio over the in-memory network (no sockets)."""

import asyncio
import random

import pytest

from kbroker.kraft.driver import RaftDriver
from kbroker.kraft.quorum_store import MemoryQuorumStore
from kbroker.kraft.raft import LEADER, CommittedBatch, RaftConfig, RaftNode
from kbroker.kraft.raft_log import MemoryRaftLog
from kbroker.kraft.snapshots import MemorySnapshotStore
from kbroker.kraft.transport import Faults, MemoryNetwork, monotonic_ms, run_memory_network
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
        await lead.close()
        rest = {i: d for i, d in drivers.items() if i != old}
        t0 = monotonic_ms()
        await wait_for(lambda: leader_of(rest) is not None)
        assert monotonic_ms() - t0 < CFG["fetch_timeout_ms"] * 3
        new = leader_of(rest)
        await new.append([b"after"])
        for d in rest.values():
            await d.close()
        pump.cancel()
    asyncio.run(main())
