"""Incremental fetch sessions visit only partitions with possible news (KIP-227 at scale):
caught-up partitions are parked on their Partition and woken by appends, log start moves,
role changes and deletion; what the client sees is Kafka's incremental answer."""
import asyncio

from kbroker.broker.fetch_sessions import wake_on_role_change
from kbroker.handlers.context import RequestContext
from kbroker.wire.errors import Errors
from kbroker.wire.generated.fetch_request import FetchRequest

from tests.handlers.test_admin_partitions import delete_records
from tests.handlers.test_handlers import batch, create, produce

T = FetchRequest.FetchTopic
N = 20


def full_fetch(h, topic, offsets):
    req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=0,
                       topics=[T(topic=topic, partitions=[
                           T.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                           for p, o in offsets.items()])], forgotten_topics_data=[])
    return h.call(1, 12, req)


def incremental(sid, epoch, topic=None, offsets=None, forget=(), max_wait=0, min_bytes=0):
    topics = [T(topic=topic, partitions=[T.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                                         for p, o in offsets.items()])] if offsets else []
    forgotten = [FetchRequest.ForgottenTopic(topic=topic, partitions=list(forget))] if forget else []
    return FetchRequest(max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=1 << 20, session_id=sid,
                        session_epoch=epoch, topics=topics, forgotten_topics_data=forgotten)


def answered(resp):
    return {(t.topic, p.partition_index): p for t in resp.responses for p in t.partitions}


def session_of(h, sid):
    return h.server.fetch_sessions.get(sid)


def test_caught_up_partitions_are_parked_and_woken_by_appends(broker):
    create(broker, "p", N)
    full = full_fetch(broker, "p", {i: 0 for i in range(N)})
    assert full.error_code == 0 and len(answered(full)) == N     # a full answer lists them all
    s = session_of(broker, full.session_id)
    assert len(s.partitions) == N and not s.ready                  # all caught up: parked
    inc = broker.call(1, 12, incremental(s.id, 1))
    assert inc.responses == [] and not s.ready
    produce(broker, "p", 7, batch(2))
    assert list(s.ready) == [("p", 7)]                             # only the appended one
    inc = broker.call(1, 12, incremental(s.id, 2))
    got = answered(inc)
    assert list(got) == [("p", 7)] and got[("p", 7)].records.size > 0 and got[("p", 7)].high_watermark == 2
    # it sent records: it stays ready until the client names its new position
    assert list(s.ready) == [("p", 7)]
    inc = broker.call(1, 12, incremental(s.id, 3, "p", {7: 2}))
    assert inc.responses == [] and not s.ready


def test_log_start_move_and_role_change_are_news(broker):
    create(broker, "q", 3)
    for i in range(3):
        produce(broker, "q", i, batch(2))
    s = session_of(broker, full_fetch(broker, "q", {i: 2 for i in range(3)}).session_id)
    assert not s.ready
    assert delete_records(broker, "q", {1: 1}) == {1: (0, 1)}
    got = answered(broker.call(1, 12, incremental(s.id, 1)))
    assert list(got) == [("q", 1)] and got[("q", 1)].log_start_offset == 1
    assert not s.ready
    part = broker.server.replicas.get("q", 2)
    saved = part.leader_state, part.leader_id
    part.leader_state, part.leader_id = None, -1     # as a role change to leaderless leaves it
    wake_on_role_change(part, None)
    got = answered(broker.call(1, 12, incremental(s.id, 2)))
    assert {k: p.error_code for k, p in got.items()} == {("q", 2): Errors.NOT_LEADER_OR_FOLLOWER}
    part.leader_state, part.leader_id = saved


def test_forgotten_and_closed_sessions_leave_no_watch(broker):
    create(broker, "f", 4)
    s = session_of(broker, full_fetch(broker, "f", {i: 0 for i in range(4)}).session_id)
    parts = [broker.server.replicas.get("f", i) for i in range(4)]
    assert all(len(p.waiters) == 1 for p in parts)
    broker.call(1, 12, incremental(s.id, 1, "f", forget=[0]))
    assert len(parts[0].waiters) == 0 and len(s.partitions) == 3
    produce(broker, "f", 0, batch(1))
    assert answered(broker.call(1, 12, incremental(s.id, 2))) == {}     # forgotten: not answered
    broker.server.fetch_sessions.remove(s.id)
    assert all(len(p.waiters) == 0 for p in parts)


def test_incremental_long_poll_wakes_on_append_to_a_parked_partition(broker):
    create(broker, "w", N)
    s = session_of(broker, full_fetch(broker, "w", {i: 0 for i in range(N)}).session_id)
    spec = broker.server.api_specs[1]

    async def main():
        ctx = RequestContext(broker.server, None, 1, 12, 1, "t", 0, "PLAINTEXT")
        pending = asyncio.ensure_future(spec.handle(ctx, incremental(s.id, 1, max_wait=5000, min_bytes=1)))
        await asyncio.sleep(0.05)
        assert not pending.done()
        produce(broker, "w", 11, batch(1))
        return await asyncio.wait_for(pending, 2)
    resp = broker.loop.run_until_complete(main())
    got = answered(resp)
    assert list(got) == [("w", 11)] and got[("w", 11)].records.size > 0


def test_append_between_the_handler_and_its_long_poll_task_wakes_it(broker):
    """The handler reads, decides to wait and returns its coroutine; an append before that
    coroutine first runs must still end the wait (the partition it read was caught up)."""
    create(broker, "r", 5)
    s = session_of(broker, full_fetch(broker, "r", {i: 0 for i in range(5)}).session_id)
    produce(broker, "r", 3, batch(1))
    assert answered(broker.call(1, 12, incremental(s.id, 1)))[("r", 3)].high_watermark == 1
    spec = broker.server.api_specs[1]

    async def main():
        ctx = RequestContext(broker.server, None, 1, 12, 1, "t", 0, "PLAINTEXT")
        # the client has read partition 3's record: at its new position it is caught up
        pending = spec.handle(ctx, incremental(s.id, 2, "r", {3: 1}, max_wait=5000, min_bytes=1))
        produce(broker, "r", 3, batch(1))          # before the long poll's first step
        return await asyncio.wait_for(pending, 2)
    got = answered(broker.loop.run_until_complete(main()))
    assert list(got) == [("r", 3)] and got[("r", 3)].records.size > 0 and got[("r", 3)].high_watermark == 2


def test_reads_run_whole_stop_after_their_time_and_the_rest_come_next(broker, monkeypatch):
    """An incremental fetch reads its ready partitions in one go: with records on thousands of
    them that held the loop ~7 us a partition. Reading stops after READ_WHOLE_S as at the byte
    budget: the rest are left out of the answer (it names only partitions with news), stay
    ready, and the following fetches read them; every record arrives once."""
    from kbroker.handlers import fetch as fetch_handler
    create(broker, "busy", N)
    full = full_fetch(broker, "busy", {i: 0 for i in range(N)})
    s = session_of(broker, full.session_id)
    for p in range(N):
        produce(broker, "busy", p, batch(2))
    monkeypatch.setattr(fetch_handler, "READ_WHOLE_S", 0.0)   # (time's up after the first read)
    offsets = {p: 0 for p in range(N)}
    epoch, rounds = 1, 0
    while any(o < 2 for o in offsets.values()):
        inc = broker.call(1, 12, incremental(s.id, epoch, "busy", offsets if epoch > 1 else None))
        epoch += 1
        rounds += 1
        got = answered(inc)
        with_records = [p for (_t, p), r in got.items() if r.records and r.records.size]
        assert len(with_records) == len(got) == 1, got   # one read per fetch at a zero time budget
        for (_t, p), r in got.items():
            assert r.error_code == 0 and r.high_watermark == 2
            if p in with_records:
                assert offsets[p] == 0
                offsets[p] = 2
        assert set(s.ready) >= {("busy", p) for p, o in offsets.items() if o < 2}
        assert rounds <= N
    assert rounds == N
