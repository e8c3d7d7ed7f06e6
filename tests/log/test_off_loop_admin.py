"""Creating and deleting many partitions does not hold the event loop: the files are made and
renamed in the log manager's admin thread while other coroutines keep running."""
import asyncio
import os

from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager


async def _ticker(stop: asyncio.Event, counter: list) -> None:
    while not stop.is_set():
        counter[0] += 1
        await asyncio.sleep(0)


def test_create_in_background_yields_and_registers(tmp_path):
    async def main():
        lm = LogManager([str(tmp_path)], LogConfig())
        lm.start_background_io()
        stop, ticks = asyncio.Event(), [0]
        ticker = asyncio.create_task(_ticker(stop, ticks))
        futs = [lm.create_in_background("t", i, now_ms=0, prepare=lambda plog: plog.log_end_offset)
                for i in range(200)]
        assert all(f is not None for f in futs)
        assert lm.get("t", 0) is None or len(lm) < 200    # not all done synchronously
        ticks_at_submit = ticks[0]
        results = await asyncio.gather(*futs)
        stop.set()
        await ticker
        # the loop ran other work while the 200 logs were being created
        assert ticks[0] > ticks_at_submit
        assert len(lm) == 200 and all(prep == 0 for _plog, prep in results)
        assert lm.get("t", 199) is results[199][0]
        assert lm.create_in_background("t", 0) is None   # exists: caller uses get_or_create
        lm.shutdown()
    asyncio.run(main())
    assert sorted(os.listdir(tmp_path / "t-7")) == sorted(os.listdir(tmp_path / "t-8"))


def test_completed_group_is_registered_a_few_per_loop_iteration(tmp_path):
    """Each registered log's future runs its owner's install in the next iteration: a group
    of completions is handed out a few per iteration, with other work running between."""
    async def main():
        lm = LogManager([str(tmp_path)], LogConfig())
        lm.start_background_io()
        n, per = 64, LogManager.CREATED_PER_ITERATION
        assert per < n
        ticks, seen = [0], []
        stop = asyncio.Event()
        ticker = asyncio.create_task(_ticker(stop, ticks))
        futs = [lm.create_in_background("t", i, now_ms=0) for i in range(n)]
        for f in futs:
            f.add_done_callback(lambda _f: seen.append(ticks[0]))
        await asyncio.gather(*futs)
        stop.set()
        await ticker
        # no loop iteration resolved more than `per` of them: the ticker ran in between
        assert max(seen.count(t) for t in set(seen)) <= per
        assert len(set(seen)) >= n // per
        lm.shutdown()
    asyncio.run(main())


def test_delete_while_creating_then_recreate(tmp_path):
    async def main():
        lm = LogManager([str(tmp_path)], LogConfig.from_props({"file.delete.delay.ms": "0"}))
        lm.start_background_io()
        fut = lm.create_in_background("t", 0, now_ms=0)
        assert lm.opening("t", 0) is fut
        assert lm.delete_many([("t", 0)], now_ms=0) == 1   # still being created
        again = lm.create_in_background("t", 0, now_ms=0)
        assert again is not fut
        try:
            await fut
            raise AssertionError("the deleted creation must fail")
        except Exception as e:  # noqa: BLE001
            assert "deleted while being created" in str(e)
        plog, _ = await again
        plog.append(bytearray(_one_batch()), 0)
        assert lm.get("t", 0) is plog and plog.log_end_offset == 1
        lm.shutdown()
    asyncio.run(main())
    # the first directory was renamed away and removed; the new one is the live log
    assert [n for n in os.listdir(tmp_path) if n.startswith("t-0")] == ["t-0"]


def test_delete_many_renames_in_background(tmp_path):
    async def main():
        lm = LogManager([str(tmp_path)], LogConfig())
        lm.start_background_io()
        for i in range(50):
            lm.get_or_create("d", i, now_ms=0)
        assert lm.delete_many([("d", i) for i in range(50)] + [("nope", 0)], now_ms=0) == 50
        assert len(lm) == 0
        lm.shutdown()   # drains the admin thread: every rename done
    asyncio.run(main())
    names = os.listdir(tmp_path)
    assert not any(n.startswith("d-") and not n.endswith("-delete") for n in names)
    assert sum(n.endswith("-delete") for n in names) == 50


def _one_batch() -> bytes:
    from kbroker.wire.records import BatchBuilder
    b = BatchBuilder()
    b.append(key=None, value=b"v", timestamp=0)
    return b.build()


def test_retention_renames_and_unlinks_in_the_io_thread(tmp_path):
    from kbroker.log.background import BackgroundIO
    from kbroker.log.partition_log import PartitionLog

    io = BackgroundIO()
    plog = PartitionLog.open(str(tmp_path / "r-0"), LogConfig.from_props({"segment.bytes": "200"}), 0, io=io)
    for _ in range(20):
        plog.append(bytearray(_one_batch()), 0)
    assert len([n for n in os.listdir(plog.dir) if n.endswith(".log")]) >= 10
    plog.high_watermark = plog.log_end_offset
    plog.delete_records(15)
    done = []
    gate = io.submit(lambda: done.append(1))   # the thread is free: queue a marker
    gate.result()
    # hold the IO thread: the renames queue behind this job, the loop's call returns at once
    import threading
    release = threading.Event()
    io.submit(release.wait)
    n = plog.delete_old_segments(0)
    assert n > 0 and not any(f.endswith(".deleted") for f in os.listdir(plog.dir))
    release.set()
    io.drain()
    assert sum(f.endswith(".log.deleted") for f in os.listdir(plog.dir)) == n
    assert plog.log_start_offset == 15 and plog.log_end_offset == 20
    assert [b.base_offset for b in plog.batches(15)] == list(range(15, 20))
    plog.delete_pending(plog.config.file_delete_delay_ms + 1)
    io.drain()
    assert not any(f.endswith(".deleted") for f in os.listdir(plog.dir))
    plog.close()
    io.close()


def test_wait_opening_waits_for_the_creations_started_before_it(tmp_path):
    """wait_opening returns once every creation started before it is done (deleted ones
    included), without waiting for later ones."""
    async def main():
        lm = LogManager([str(tmp_path)], LogConfig.from_props({"file.delete.delay.ms": "0"}))
        lm.start_background_io()
        await lm.wait_opening()                      # nothing started: returns at once
        first = [lm.create_in_background("w", i, now_ms=0) for i in range(300)]
        lm.delete_many([("w", 3)], now_ms=0)          # a doomed creation still counts
        waiting = asyncio.ensure_future(lm.wait_opening())
        await asyncio.sleep(0)
        later = [lm.create_in_background("x", i, now_ms=0) for i in range(200)]
        await waiting
        assert all(f.done() for f in first)
        assert not all(f.done() for f in later)       # created after the first ones (FIFO)
        await lm.wait_opening()
        assert all(f.done() for f in later)
        lm.shutdown()
    asyncio.run(main())


def test_a_cancelled_wait_opening_costs_no_callback_per_partition(tmp_path):
    """CreateTopics stops waiting at its timeout. Waiting on each partition's future
    (gather) made that cancellation, and the completions, a callback per partition: 16,000
    in one iteration at 10,000 partitions. The ready queue stays short instead."""
    async def main():
        lm = LogManager([str(tmp_path)], LogConfig())
        lm.start_background_io()
        loop = asyncio.get_running_loop()
        stop, most_ready = asyncio.Event(), [0]

        async def watch():   # once an iteration: asyncio's queue of ready callbacks
            while not stop.is_set():
                most_ready[0] = max(most_ready[0], len(loop._ready))
                await asyncio.sleep(0)
        futs = [lm.create_in_background("c", i, now_ms=0) for i in range(1000)]
        await asyncio.sleep(0.02)
        watcher = asyncio.create_task(watch())
        try:
            await asyncio.wait_for(lm.wait_opening(), 0.001)
        except asyncio.TimeoutError:
            pass
        for _ in range(5):
            await asyncio.sleep(0)
        stop.set()
        await watcher
        assert not all(f.done() for f in futs)        # the wait ended before the creations
        assert most_ready[0] < 40, most_ready
        await lm.wait_opening()
        lm.shutdown()
    asyncio.run(main())
