"""RaftControllerRuntime over three in-memory Raft drivers (real asyncio, no sockets):
operations pipeline their commits, and a deposed leader drops what it applied but never
committed."""

import asyncio
import itertools
import random
import uuid

import pytest

from kbroker.clock import SYSTEM_CLOCK
from kbroker.kraft.controller import Controller, NewTopic
from kbroker.kraft.controller_apis import NotControllerError
from kbroker.kraft.driver import RaftDriver
from kbroker.kraft.image import MetadataImage
from kbroker.kraft.quorum_runtime import RaftControllerRuntime
from kbroker.kraft.quorum_store import MemoryQuorumStore
from kbroker.kraft.raft import LEADER, RaftConfig, RaftNode
from kbroker.kraft.raft_log import MemoryRaftLog
from kbroker.kraft.snapshots import MemorySnapshotStore
from kbroker.kraft.transport import Faults, MemoryNetwork, run_memory_network
from kbroker.wire.errors import Errors

CFG = dict(election_timeout_ms=300, fetch_timeout_ms=600, request_timeout_ms=300,
           fetch_max_wait_ms=100, election_backoff_max_ms=100)
DEFAULTS = {"num.partitions": 1, "default.replication.factor": 1, "delete.topic.enable": True}
now_ms = SYSTEM_CLOCK.monotonic_ms


async def wait_for(cond, timeout=20.0):
    end = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < end, "condition not reached"
        await asyncio.sleep(0.005)


def make_quorum(ids, delay_ms):
    net = MemoryNetwork(random.Random(7), Faults(min_delay_ms=delay_ms, max_delay_ms=delay_ms), clock=now_ms)
    uuids = (uuid.UUID(int=1000 + i) for i in itertools.count())
    runtimes = {}
    for i in ids:
        node = RaftNode(i, MemoryRaftLog(), MemoryQuorumStore(), MemorySnapshotStore(), RaftConfig(**CFG),
                        random.Random(100 + i), voters=set(ids), now_ms=now_ms())
        driver = RaftDriver(node, net.endpoint(i))
        controller = Controller(i, DEFAULTS, uuid_factory=lambda: next(uuids))
        runtimes[i] = RaftControllerRuntime(controller, MetadataImage(), driver, now_ms=now_ms)
    return net, runtimes


def run_quorum(delay_ms, body):
    """``await body(net, runtimes)`` on a fresh quorum of nodes 1-3; always stopped after."""
    async def main():
        net, runtimes = make_quorum([1, 2, 3], delay_ms)
        pump = asyncio.create_task(run_memory_network(net))
        try:
            await body(net, runtimes)
        finally:
            for r in runtimes.values():
                await r.driver.close()
            pump.cancel()
    asyncio.run(main())


def active_of(runtimes):
    active = [r for r in runtimes.values() if r.active and r.driver._task is not None]
    return active[0] if len(active) == 1 else None


async def start(runtimes):
    for r in runtimes.values():
        r.driver.start()
    await wait_for(lambda: active_of(runtimes) is not None)
    lead = active_of(runtimes)
    await lead.submit(lambda c, now: c.bootstrap(now))
    for b in runtimes:
        await lead.submit(lambda c, now, b=b: c.register_broker(
            b, uuid.UUID(int=b), [("PLAINTEXT", "127.0.0.1", 9000 + b, 0)], None, now))
    return lead


def create(name):
    return lambda c, now: c.create_topics([NewTopic(name)], False, now)


@pytest.mark.timeout(60)
def test_operations_in_flight_share_commits_and_see_each_other():
    async def body(net, runtimes):
        lead = await start(runtimes)
        node = lead.node
        names = [f"t{k}" for k in range(20)] + ["t3"]          # t3 twice: the second sees the first
        ops = [asyncio.ensure_future(lead.submit(create(n))) for n in names]
        hw_before = node.high_watermark
        for _ in range(50):                                      # no message is due for 30 ms
            await asyncio.sleep(0)
        # every operation appended (2 records each: topic + partition) before one commit came back
        assert node.log_end_offset - hw_before >= 2 * 20 and node.high_watermark == hw_before
        results = [r[0] for r in await asyncio.gather(*ops)]
        assert [r.error for r in results[:20]] == [0] * 20
        assert results[20].error == Errors.TOPIC_ALREADY_EXISTS
        for r in runtimes.values():                              # every image agrees
            await wait_for(lambda r=r: r.applied >= lead.applied)
            assert sorted(r.image.topics_by_name) == sorted(set(names))
            assert sorted(r.controller.image.topics_by_name) == sorted(set(names))
    run_quorum(30, body)


@pytest.mark.timeout(60)
def test_deposed_leader_drops_applied_but_uncommitted_records():
    async def body(net, runtimes):
        old = await start(runtimes)
        await old.submit(create("kept"))
        others = [i for i in runtimes if i != old.node.node_id]
        net.isolate(old.node.node_id, others)
        doomed = asyncio.ensure_future(old.submit(create("phantom")))
        await asyncio.sleep(0)
        assert "phantom" in old.controller.image.topics_by_name      # applied at append
        rest = {i: runtimes[i] for i in others}
        await wait_for(lambda: active_of(rest) is not None)
        new = active_of(rest)
        assert (await new.submit(create("real")))[0].error == 0
        net.heal_all()
        with pytest.raises(NotControllerError):
            await doomed
        await wait_for(lambda: old.node.role != LEADER
                       and all(r.applied >= new.applied for r in runtimes.values()))
        for r in runtimes.values():
            assert sorted(r.controller.image.topics_by_name) == ["kept", "real"], r.node.node_id
            assert sorted(r.image.topics_by_name) == ["kept", "real"], r.node.node_id
    run_quorum(2, body)
