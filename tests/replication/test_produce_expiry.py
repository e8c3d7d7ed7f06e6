"""acks=all produces waiting for the ISR (Kafka's DelayedProduce purgatory): completed entries
leave the deadline heap without waiting for their 30 s deadline, they release what they held,
and the replica manager keeps one expiry timer, for the earliest deadline, whatever the number
of waiting requests; a later request with an earlier deadline still times out on time."""
import asyncio
import time

from kbroker.broker.replica_manager import ReplicaManager
from kbroker.broker.storage import random_uuid
from kbroker.kraft.image import MetadataImage
from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager
from kbroker.replication.delayed_produce import PURGE_SLACK, DelayedProduces
from kbroker.wire.errors import Errors
from kbroker.wire.generated.partition_record import PartitionRecord
from kbroker.wire.generated.topic_record import TopicRecord
from kbroker.wire.records import BatchBuilder

from .test_topic_removal import _apply


def test_completed_produces_leave_the_deadline_heap():
    d = DelayedProduces()
    token = object()
    for i in range(20_000):                       # a long run of produces answered at once
        d.add("p", i, 30_000 + i, token)
        assert d.on_high_watermark("p", i + 1, 2, 2) == [(token, Errors.NONE)]
        assert len(d._deadlines) <= 2 * (len(d) + 1) + PURGE_SLACK
    assert len(d) == 0
    assert all(e[2].token is None for e in d._deadlines)   # a completed entry holds nothing
    # live entries survive every purge and still expire in deadline order
    d.add("p", 10**6, 40_000, "late")
    d.add("q", 10**6, 35_000, "early")
    for i in range(3 * PURGE_SLACK):
        d.add("r", i, 50_000, i)
        d.on_high_watermark("r", i + 1, 2, 2)
    assert d.next_deadline() == 35_000
    assert d.expire(39_999) == [("early", Errors.REQUEST_TIMED_OUT)]
    assert d.expire(40_000) == [("late", Errors.REQUEST_TIMED_OUT)]
    assert len(d) == 0


def test_one_expiry_timer_for_many_waiting_produces(tmp_path, monkeypatch):
    async def run():
        loop = asyncio.get_running_loop()
        timers = []
        real = loop.call_later
        monkeypatch.setattr(loop, "call_later", lambda *a: (timers.append(a[0]), real(*a))[1])
        lm = LogManager([str(tmp_path)], LogConfig())
        image = MetadataImage()
        rm = ReplicaManager(1, lm, image, lambda t: LogConfig(), lambda: int(time.monotonic() * 1000))
        tid = random_uuid()
        _apply(image, rm, TopicRecord(name="t", topic_id=tid))
        _apply(image, rm, PartitionRecord(partition_id=0, topic_id=tid, replicas=[1, 2], isr=[1, 2], leader=1,
                                          leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        part = rm.get("t", 0)

        def produce(timeout_ms):
            b = BatchBuilder(0)
            b.append(value=b"v", timestamp=1)
            res = rm.append(part, bytearray(b.build()), 1000)
            return rm.await_replication([(part, res.last_offset)], timeout_ms)   # broker 2 never fetches

        slow = [produce(30_000) for _ in range(500)]
        assert len(timers) == 1                      # not one per request
        t0 = time.monotonic()
        fast = produce(100)                          # an earlier deadline re-arms the timer
        assert await asyncio.wait_for(fast, 5) == {part: Errors.REQUEST_TIMED_OUT}
        waited = time.monotonic() - t0
        assert not any(f.done() for f in slow)
        lm.shutdown()
        return waited, len(timers)

    waited, n = asyncio.run(run())
    assert waited >= 0.09            # not before its deadline (wait_for bounds it from above)
    assert n <= 5          # the first, the earlier one, the next after it (and a re-arm if one fired early)
