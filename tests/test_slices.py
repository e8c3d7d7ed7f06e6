"""Sliced work takes turns: whatever number of jobs run at once, the loop runs one slice
per iteration (fifty offsets partitions loading as fifty tasks held it for 300 ms each
iteration), round robin, and each caller gets its own result, error or cancellation."""
import asyncio

import pytest

from kbroker import slices
from kbroker.slices import run_in_slices, run_to_end


def job(name, n, seen, tick, fail_at=None):
    for i in range(n):
        yield
        if i == fail_at:
            raise ValueError(name)
        seen.append((name, tick[0]))
    return f"{name} done"


async def ticking():
    """A counter the loop bumps once per iteration."""
    loop, tick = asyncio.get_running_loop(), [0]

    def bump():
        tick[0] += 1
        loop.call_soon(bump)
    loop.call_soon(bump)
    return tick


def test_jobs_take_turns_one_slice_per_iteration():
    async def scenario():
        tick, seen = await ticking(), []
        results = await asyncio.gather(*(run_in_slices(job(n, 20, seen, tick), slice_s=0) for n in "abc"))
        return results, seen
    results, seen = asyncio.run(scenario())
    assert results == ["a done", "b done", "c done"]
    assert len(seen) == 60
    iterations = [t for _, t in seen]
    assert len(set(iterations)) == len(iterations)            # never two slices in one iteration
    assert [n for n, _ in seen[:6]] == ["a", "b", "c", "a", "b", "c"]   # round robin


def test_an_error_reaches_its_caller_only_and_a_cancelled_job_stops():
    async def scenario():
        tick, seen = await ticking(), []
        bad = asyncio.ensure_future(run_in_slices(job("bad", 10, seen, tick, fail_at=3), slice_s=0))
        gone = asyncio.ensure_future(run_in_slices(job("gone", 1000, seen, tick), slice_s=0))
        good = await run_in_slices(job("good", 10, seen, tick), slice_s=0)
        with pytest.raises(ValueError):
            await bad
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        before = sum(1 for n, _ in seen if n == "gone")
        for _ in range(20):
            await asyncio.sleep(0)
        return good, before, sum(1 for n, _ in seen if n == "gone")
    good, before, after = asyncio.run(scenario())
    assert good == "good done"
    assert before == after < 1000                              # no step after the cancel


def test_run_to_end_runs_in_one_go():
    tick, seen = [7], []
    assert run_to_end(job("x", 5, seen, tick)) == "x done" and len(seen) == 5


def test_batches_to_the_end_reads_what_is_appended_while_it_pauses(tmp_path):
    from kbroker.log.partition_log import PartitionLog
    from kbroker.slices import batches_to_the_end
    from tests.log.helpers import make_batch

    plog = PartitionLog.open(str(tmp_path / "t-0"), None, 0)
    for _ in range(3):
        plog.append(make_batch(2), 0)
    seen = []
    for b in batches_to_the_end(plog):
        seen.append((b.base_offset, b.last_offset))
        if len(seen) == 2:                       # appended while the reader pauses
            plog.append(make_batch(1), 0)
            plog.append(make_batch(1), 0)
    assert seen == [(0, 1), (2, 3), (4, 5), (6, 6), (7, 7)]
    assert list(batches_to_the_end(PartitionLog.open(str(tmp_path / "e-0"), None, 0))) == []


def test_batches_to_the_end_says_when_it_caught_up_and_reads_on(tmp_path):
    from kbroker.log.partition_log import PartitionLog
    from kbroker.slices import batches_to_the_end
    from tests.log.helpers import make_batch

    plog = PartitionLog.open(str(tmp_path / "t-0"), None, 0)
    plog.append(make_batch(2), 0)
    end = object()
    seen = []
    for b in batches_to_the_end(plog, caught_up=end):
        seen.append("end" if b is end else b.base_offset)
        if seen == [0, "end"]:                    # appended while the caller finishes its work
            plog.append(make_batch(1), 0)
    assert seen == [0, "end", 2, "end"]
    assert list(batches_to_the_end(PartitionLog.open(str(tmp_path / "e-0"), None, 0), caught_up=end)) == []


def test_a_job_waiting_for_a_future_sits_out_and_resumes_with_its_result():
    """A step that yields a concurrent future (an fsync on an IO thread) parks its job: the
    other jobs take their turns meanwhile, and the job goes on once the future is done."""
    import concurrent.futures
    import threading

    release = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(1)

    def waiter(seen, tick):
        f = pool.submit(lambda: release.wait(5) and "synced")
        yield f
        seen.append(("waiter", f.result(), tick[0]))
        return "waiter done"

    async def scenario():
        tick, seen = await ticking(), []
        w = asyncio.ensure_future(run_in_slices(waiter(seen, tick), slice_s=0))
        other = await run_in_slices(job("other", 30, seen, tick), slice_s=0)
        ran_while_parked = len(seen)
        release.set()
        return await w, other, ran_while_parked, seen
    try:
        w, other, ran_while_parked, seen = asyncio.run(scenario())
    finally:
        pool.shutdown()
    assert (w, other) == ("waiter done", "other done")
    assert ran_while_parked == 30                     # every step of the other job, none of its
    assert seen[-1][:2] == ("waiter", "synced")


def test_run_to_end_waits_for_a_yielded_future():
    import concurrent.futures
    import time

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        def steps():
            f = pool.submit(lambda: time.sleep(0.05) or 42)
            yield f
            return f.done() and f.result()
        assert run_to_end(steps()) == 42


def test_a_failed_future_reaches_the_job_and_its_caller():
    import concurrent.futures

    def boom():
        raise OSError("fsync failed")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        def steps():
            f = pool.submit(boom)
            yield f
            f.result()   # what the cleaner does after its fsync
            return "not reached"

        async def scenario():
            with pytest.raises(OSError, match="fsync failed"):
                await run_in_slices(steps(), slice_s=0)
        asyncio.run(scenario())


def test_emptied_lets_go_of_lists_a_step_at_a_time():
    import weakref

    class Obj:
        pass
    a = [Obj() for _ in range(2500)]
    b = [Obj() for _ in range(10)]
    last = weakref.ref(a[-1])
    first = weakref.ref(a[0])
    steps = slices.emptied(a, b, step=1000)
    next(steps)
    assert len(a) == 1500 and last() is None and first() is not None   # freed from the end
    assert list(steps) == [None]                                       # one more pause, then done
    assert a == [] and b == [] and first() is None


def test_a_cancelled_job_is_closed_at_once_not_at_its_next_turn():
    """What a cancelled job's frame holds (a fetch's 10,000 partitions, when its client left)
    goes with the cancellation, not one runner turn later."""
    closed = []

    def held():
        try:
            while True:
                yield
        finally:
            closed.append(True)

    async def caller(at_cancel):
        try:
            await run_in_slices(held(), slice_s=0)
        except asyncio.CancelledError:
            at_cancel.extend(closed)   # as the cancellation reaches its caller
            raise

    async def scenario():
        others = asyncio.ensure_future(run_in_slices(job("other", 100, [], [0]), slice_s=0))
        at_cancel = []
        mine = asyncio.ensure_future(caller(at_cancel))
        for _ in range(5):
            await asyncio.sleep(0)
        mine.cancel()
        with pytest.raises(asyncio.CancelledError):
            await mine
        await others
        return at_cancel
    assert asyncio.run(scenario()) == [True]
