"""A fetch that decides to long-poll is woken by an append that lands before its task first
runs (the connection runs the handler's coroutine as a task, a loop iteration later). Without
that, a follower waits its whole replica.fetch.wait.max.ms with data waiting, and the acks=all
produce behind it too."""

import asyncio
import inspect

from kbroker.handlers.context import RequestContext
from kbroker.replication.roles import apply_partition_state
from kbroker.wire.generated.fetch_request import FetchRequest
from kbroker.wire.generated.produce_request import ProduceRequest

from tests.handlers.test_handlers import batch, create, produce

FOLLOWER = 2
LONG_WAIT_MS = 30_000        # a missed wake-up would hold the fetch this long


def _start(broker, api_key, version, req):
    """The handler's answer as the connection gets it: a response or a coroutine not yet run."""
    ctx = RequestContext(broker.server, None, api_key, version, 1, "t", broker.server.clock.now_ms(), "PLAINTEXT")
    return broker.server.api_specs[api_key].handle(ctx, req)


def _fetch_request(topic, offset, *, replica_id=-1, leader_epoch=-1, topic_id=None, max_wait_ms=LONG_WAIT_MS):
    T = FetchRequest.FetchTopic
    return FetchRequest(
        replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=-1),
        max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_id=0, session_epoch=-1,
        topics=[T(topic=topic, topic_id=topic_id or T().topic_id, partitions=[T.FetchPartition(
            partition=0, fetch_offset=offset, current_leader_epoch=leader_epoch,
            partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[])


def _finish(broker, pending, timeout=5.0):
    async def run():
        return await asyncio.wait_for(asyncio.ensure_future(pending), timeout)
    return broker.loop.run_until_complete(run())


def test_consumer_long_poll_sees_an_append_made_before_it_starts(broker):
    create(broker, "c")
    pending = _start(broker, 1, 12, _fetch_request("c", 0))
    assert inspect.isawaitable(pending)          # nothing to read yet: a long poll
    produce(broker, "c", 0, batch(2), acks=1)    # lands before the long poll's task runs
    resp = _finish(broker, pending)
    assert resp.responses[0].partitions[0].records.size > 0


def test_follower_fetch_and_acks_all_answer_without_waiting_out_a_timer(broker):
    create(broker, "r")
    server = broker.server
    part = server.replicas.get("r", 0)
    me = server.node_id
    # this node leads with a follower in the ISR (as a PartitionChangeRecord would say)
    apply_partition_state(part, me, me, part.leader_epoch + 1, part.partition_epoch + 1,
                          [me, FOLLOWER], [me, FOLLOWER], server.clock.now_ms())
    tid = server.image.topics_by_name["r"].topic_id
    epoch = part.leader_epoch

    def follower_fetch(offset, max_wait_ms=LONG_WAIT_MS):
        return _start(broker, 1, 15, _fetch_request("r", offset, replica_id=FOLLOWER, leader_epoch=epoch,
                                                    topic_id=tid, max_wait_ms=max_wait_ms))

    first = follower_fetch(0, max_wait_ms=0)      # the follower's progress is known: HW 0
    assert first.responses[0].partitions[0].error_code == 0
    poll = follower_fetch(0)
    assert inspect.isawaitable(poll)
    # an acks=all produce arrives before the follower's long poll runs
    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(acks=-1, timeout_ms=LONG_WAIT_MS, topic_data=[
        T(name="r", partition_data=[T.PartitionProduceData(index=0, records=batch(3))])])
    acked = _start(broker, 0, 9, req)
    assert inspect.isawaitable(acked)            # waits for the follower
    got = _finish(broker, poll)
    assert got.responses[0].partitions[0].records.size > 0
    assert part.high_watermark == 0              # not before the follower has the batch

    async def follower_catches_up_then_answer():
        ack = asyncio.ensure_future(acked)
        await asyncio.sleep(0)
        assert not ack.done()
        nxt = follower_fetch(part.log_end_offset)   # its next fetch proves it has 0..2
        nxt_task = asyncio.ensure_future(nxt) if inspect.isawaitable(nxt) else None
        resp = await asyncio.wait_for(ack, 5)
        if nxt_task is not None:
            nxt_task.cancel()
        return resp
    resp = broker.loop.run_until_complete(follower_catches_up_then_answer())
    pr = resp.responses[0].partition_responses[0]
    assert (pr.error_code, pr.base_offset) == (0, 0)
    assert part.high_watermark == 3
