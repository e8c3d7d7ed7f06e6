"""GroupCoordinatorRuntime over a fake broker: replies leave only after the records are
appended, timers fire from the asyncio loop, and a new runtime rebuilds from the log."""
import asyncio

from kbroker.groups import errors as E
from kbroker.groups.classic.messages import JoinRequest, SyncRequest
from kbroker.groups.config import GroupConfig
from kbroker.groups.offsets import CommitPartition
from kbroker.groups.partitioning import OFFSETS_TOPIC
from kbroker.groups.runtime import GroupCoordinatorRuntime
from kbroker.groups.shard import OffsetCommitRequest
from tests.groups.fake_offsets_broker import fake_broker as _fake_broker

N = 3


def fake_broker(replicas=None):
    return _fake_broker(N, replicas)


def test_join_sync_commit_then_reload():
    async def scenario():
        broker = fake_broker()
        clock = [1_000]
        rt = GroupCoordinatorRuntime(broker, GroupConfig(num_partitions=N, initial_rebalance_delay_ms=0),
                                     lambda: clock[0])
        rt.start()
        jr = JoinRequest("g", "", "consumer", [("range", b"sub")], 10_000, 10_000, client_id="c", version=3)
        r = await asyncio.wait_for(rt.run_parked("g", lambda s, t, now: s.join_group(jr, t, now)), 5)
        assert r.error == E.NONE and r.generation_id == 1
        sr = SyncRequest("g", 1, r.member_id, {r.member_id: b"assigned"})
        s = await rt.run_parked("g", lambda sh, t, now: sh.sync_group(sr, t, now))
        assert s.assignment == b"assigned"
        oc = OffsetCommitRequest("g", [("t", [CommitPartition(0, 42, -1, "meta")])], 1, r.member_id, version=8)
        assert await rt.run("g", lambda sh, now: sh.commit_offsets(oc, now)) == [("t", [(0, E.NONE)])]
        part = broker.replicas.get(OFFSETS_TOPIC, rt.partition_for("g"))
        assert len(part.log.buffers) == 2          # the assignment (at sync) and the commit
        await rt.shutdown()

        rt2 = GroupCoordinatorRuntime(fake_broker(broker.replicas), GroupConfig(num_partitions=N), lambda: clock[0])
        rt2.start()
        shard = rt2.shard_for("g")
        g = shard.classic_group("g")
        assert g.generation == 1 and g.members[r.member_id].assignment == b"assigned"
        err, rows = shard.fetch_offsets("g", [("t", [0])])
        assert rows[0][1][0].offset == 42 and rows[0][1][0].metadata == "meta"
        await rt2.shutdown()
    asyncio.run(scenario())


def test_session_timeout_fires_from_the_loop():
    async def scenario():
        broker = fake_broker()
        clock = [1_000]
        rt = GroupCoordinatorRuntime(broker, GroupConfig(num_partitions=N, initial_rebalance_delay_ms=0,
                                                         min_session_timeout_ms=10), lambda: clock[0])
        rt.start()
        jr = JoinRequest("g", "", "consumer", [("range", b"")], 50, 50, version=3)
        r = await rt.run_parked("g", lambda s, t, now: s.join_group(jr, t, now))
        await rt.run_parked("g", lambda sh, t, now: sh.sync_group(SyncRequest("g", 1, r.member_id, {}), t, now))
        clock[0] += 100
        rt._wake.set()
        for _ in range(50):
            await asyncio.sleep(0.01)
            if not rt.shard_for("g").classic_group("g").members:
                break
        assert not rt.shard_for("g").classic_group("g").members
        await rt.shutdown()
    asyncio.run(scenario())


def test_offset_expiry_runs_from_the_loop_and_writes_tombstones():
    """offsets.retention.minutes for a group without members: the periodic check
    (offsets.retention.check.interval.ms) fires from the loop, appends tombstones, and a
    runtime rebuilt from the log has neither the offsets nor the group."""
    from kbroker.groups import record_codec
    from kbroker.groups.records import OffsetCommitRecord

    async def scenario():
        broker = fake_broker()
        clock = [1_000]
        cfg = GroupConfig(num_partitions=N, offsets_retention_ms=10_000, offsets_retention_check_interval_ms=1_000)
        rt = GroupCoordinatorRuntime(broker, cfg, lambda: clock[0])
        rt.start()
        for gid, off in (("old", 5), ("new", 6)):
            oc = OffsetCommitRequest(gid, [("t", [CommitPartition(0, off)])], version=8)
            assert await rt.run(gid, lambda sh, now: sh.commit_offsets(oc, now)) == [("t", [(0, E.NONE)])]
            clock[0] += 5_000                    # "new" is committed 5 s after "old"
        clock[0] = 1_000 + 10_500                # old: 10.5 s old, new: 5.5 s old
        rt._wake.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if "old" not in rt.shard_for("old").groups:
                break
        assert "old" not in rt.shard_for("old").groups
        assert rt.shard_for("new").offsets.group_offsets("new")
        await rt.shutdown()

        part = broker.replicas.get(OFFSETS_TOPIC, rt.partition_for("old"))
        recs = [record_codec.decode(r.key, r.value) for b in part.log.batches() for r in b.records()]
        assert OffsetCommitRecord("old", "t", 0, None) in recs     # the tombstone is in the log
        rt2 = GroupCoordinatorRuntime(fake_broker(broker.replicas), cfg, lambda: clock[0])
        rt2.start()
        assert "old" not in rt2.shard_for("old").groups
        assert rt2.shard_for("old").fetch_offsets("old", [("t", [0])])[1][0][1][0].offset == -1
        assert rt2.shard_for("new").fetch_offsets("new", [("t", [0])])[1][0][1][0].offset == 6
        await rt2.shutdown()
    asyncio.run(scenario())


async def committed(group: str, n: int, clock: list):
    """A fake broker whose __consumer_offsets holds ``n`` commits of ``group`` (offsets 0 to
    n - 1 of t-0, one batch each), written by a runtime that is shut down again."""
    broker = fake_broker()
    rt = GroupCoordinatorRuntime(broker, GroupConfig(num_partitions=N), lambda: clock[0])
    rt.start()
    for i in range(n):
        oc = OffsetCommitRequest(group, [("t", [CommitPartition(0, i, -1, "")])], -1, "", version=8)
        await rt.run(group, lambda sh, now, oc=oc: sh.commit_offsets(oc, now))
    await rt.shutdown()
    return broker, rt


def test_becoming_leader_of_a_large_partition_loads_it_in_slices(monkeypatch):
    """A partition above LOAD_IN_ONE_GO_BYTES is replayed by a task that yields between
    batches; its groups answer COORDINATOR_LOAD_IN_PROGRESS until the replay is done."""
    from kbroker.groups import runtime as runtime_mod
    from kbroker.groups.runtime import CoordinatorError

    monkeypatch.setattr(runtime_mod, "LOAD_IN_ONE_GO_BYTES", 1)

    async def scenario():
        clock = [1_000]
        broker, rt = await committed("g", 300, clock)

        broker2 = fake_broker(broker.replicas)
        p = rt.partition_for("g")
        broker2.replicas.set_role(p, leader=False, epoch=2)            # another node leads it
        rt2 = GroupCoordinatorRuntime(broker2, GroupConfig(num_partitions=N), lambda: clock[0])
        rt2.load_slice_s = 0          # yield after every batch
        rt2.start()
        broker2.replicas.set_role(p, leader=True, epoch=3)             # leadership moves here
        try:
            rt2.shard_for("g")
            raise AssertionError("must be loading")
        except CoordinatorError as e:
            assert e.code == E.COORDINATOR_LOAD_IN_PROGRESS
        ticks = 0
        while p in rt2._loading:
            ticks += 1
            await asyncio.sleep(0)
        err, rows = rt2.shard_for("g").fetch_offsets("g", [("t", [0])])
        await rt2.shutdown()
        return ticks, rows
    ticks, rows = asyncio.run(scenario())
    assert ticks > 1                      # the loop ran other work while it loaded
    assert rows[0][1][0].offset == 299


def test_a_sliced_load_replays_what_is_appended_while_it_runs(monkeypatch):
    """Records that reach the partition during a sliced load (a transaction marker written
    for its offsets finds no shard to apply to yet) are replayed before the shard is
    installed: the load ends only at the log end."""
    from kbroker.groups import runtime as runtime_mod

    monkeypatch.setattr(runtime_mod, "LOAD_IN_ONE_GO_BYTES", 1)

    async def scenario():
        clock = [1_000]
        broker, rt = await committed("g", 201, clock)
        p = rt.partition_for("g")
        log = broker.replicas.get(OFFSETS_TOPIC, p).log
        late = log.buffers.pop()                # the commit of offset 200 arrives mid-load

        broker2 = fake_broker(broker.replicas)
        rt2 = GroupCoordinatorRuntime(broker2, GroupConfig(num_partitions=N), lambda: clock[0])
        rt2.load_slice_s = 0                    # yield after every batch
        rt2.start()                             # start-up loads large partitions in slices too
        assert p in rt2._loading
        for _ in range(50):
            await asyncio.sleep(0)
        assert p in rt2._loading
        log.buffers.append(late)
        while p in rt2._loading:
            await asyncio.sleep(0)
        err, rows = rt2.shard_for("g").fetch_offsets("g", [("t", [0])])
        await rt2.shutdown()
        return rows
    assert asyncio.run(scenario())[0][1][0].offset == 200


def test_many_parked_replies_are_released_a_few_per_loop_iteration():
    """A rebalance answers every parked JoinGroup at once: each answer resumes a request task,
    so all of them in one iteration held the loop. RELEASE_PER_ITERATION per iteration, all
    answered, each with its own response."""
    from kbroker.groups.result import Result

    async def main():
        loop = asyncio.get_running_loop()
        tokens = [loop.create_future() for _ in range(50)]
        res = Result(replies=[(t, f"resp{i}") for i, t in enumerate(tokens)])
        GroupCoordinatorRuntime._release(res, 0)
        done_per_iteration = [sum(t.done() for t in tokens)]
        while done_per_iteration[-1] < 50:
            await asyncio.sleep(0)
            done_per_iteration.append(sum(t.done() for t in tokens))
        assert [t.result() for t in tokens] == [f"resp{i}" for i in range(50)]
        return done_per_iteration
    per = asyncio.run(main())
    step = GroupCoordinatorRuntime.RELEASE_PER_ITERATION
    assert per[0] == step                               # the old code: all 50 at once
    assert all(b - a <= step for a, b in zip(per, per[1:]))
