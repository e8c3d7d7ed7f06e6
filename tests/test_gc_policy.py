"""kbroker.gc_policy: no automatic full collection while partitions are being created; the
young generations are still collected; the thresholds come back and survivors are frozen."""

import asyncio
import gc

import pytest

from kbroker import gc_policy
from kbroker.log.log_manager import LogManager


@pytest.fixture
def collector():
    """Records the generation of every collection; leaves the collector as it found it."""
    gens = []

    def cb(phase, info):
        if phase == "start":
            gens.append(info["generation"])
    before = gc.get_threshold()
    gc.callbacks.append(cb)
    yield gens
    gc.callbacks.remove(cb)
    while gc_policy.held():
        gc_policy.release_full_collections(freeze=False)
    gc.set_threshold(*before)
    gc.unfreeze()


def _churn(n=300_000):
    keep = []
    for i in range(n):   # cyclic objects that survive: gen0 and gen1 collections run
        a = [i]
        a.append(a)
        keep.append(a)
    return keep


def test_full_collections_wait_while_held(collector):
    gc.set_threshold(700, 10, 10)
    gc_policy.hold_full_collections()
    gc_policy.hold_full_collections()          # holds nest
    kept = _churn()
    assert 0 in collector and 1 in collector and 2 not in collector
    gc_policy.release_full_collections()
    assert gc_policy.held() and gc.get_threshold()[2] == gc_policy.HELD_THRESHOLD2
    frozen = gc.get_freeze_count()
    gc_policy.release_full_collections()
    assert not gc_policy.held() and gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() > frozen      # the survivors (kept) are frozen
    collector.clear()
    more = _churn()
    assert 2 in collector                      # without a hold full collections run again
    del kept, more


def test_log_manager_holds_while_partitions_are_created(tmp_path, collector):
    gc.set_threshold(700, 10, 10)

    async def main():
        lm = LogManager([str(tmp_path)])
        lm.hold_gc_while_creating = True
        lm.start_background_io()
        try:
            futs = [lm.create_in_background("t", i) for i in range(20)]
            assert gc_policy.held()
            await asyncio.gather(*futs)
            assert not gc_policy.held() and gc.get_threshold() == (700, 10, 10)
            assert len([k for k in lm._logs if k[0] == "t"]) == 20
        finally:
            lm.shutdown()
    asyncio.run(main())


def test_serving_makes_full_collections_rarer_and_holds_keep_it(collector):
    gc.set_threshold(700, 10, 10)
    gc_policy.for_serving()
    assert gc.get_threshold() == (700, 10, gc_policy.SERVING_THRESHOLD2)
    gc_policy.hold_full_collections()
    gc_policy.release_full_collections(freeze=False)
    assert gc.get_threshold() == (700, 10, gc_policy.SERVING_THRESHOLD2)
    gc.set_threshold(700, 10, 10)
    gc_policy.hold_full_collections()
    gc_policy.for_serving()                       # during a hold: what its release restores
    assert gc.get_threshold()[2] == gc_policy.HELD_THRESHOLD2
    gc_policy.release_full_collections(freeze=False)
    assert gc.get_threshold() == (700, 10, gc_policy.SERVING_THRESHOLD2)


def test_quiet_turns_collections_off_until_the_last_request_ends():
    async def main():
        assert gc.isenabled()
        gc_policy.begin_quiet()
        gc_policy.begin_quiet()                   # quiets nest
        assert not gc.isenabled()
        gc_policy.end_quiet()
        assert not gc.isenabled()
        gc_policy.end_quiet()
        assert not gc.isenabled()                 # on at the loop's next iteration
        await asyncio.sleep(0)
        assert gc.isenabled()
    asyncio.run(main())


def test_a_request_that_begins_before_the_collector_is_back_keeps_it_quiet():
    async def main():
        gc_policy.begin_quiet()
        gc_policy.end_quiet()
        gc_policy.begin_quiet()
        await asyncio.sleep(0)
        assert not gc.isenabled()
        gc_policy.end_quiet()
        await asyncio.sleep(0)
        assert gc.isenabled()
    asyncio.run(main())


def test_quiet_lasts_quiet_max_s_at_most_then_collections_run_until_all_end(monkeypatch):
    monkeypatch.setattr(gc_policy, "QUIET_MAX_S", 0.05)

    async def main():
        gc_policy.begin_quiet()
        assert not gc.isenabled()
        await asyncio.sleep(0.1)
        assert gc.isenabled()                     # the longest quiet is over
        gc_policy.begin_quiet()                   # another request: still on
        assert gc.isenabled()
        gc_policy.end_quiet()
        gc_policy.end_quiet()
        gc_policy.begin_quiet()                   # none in flight before it: quiet again
        assert not gc.isenabled()
        gc_policy.end_quiet()
        await asyncio.sleep(0)
        assert gc.isenabled()
    asyncio.run(main())


def test_quiet_leaves_a_collector_someone_else_turned_off_off():
    async def main():
        gc.disable()
        try:
            gc_policy.begin_quiet()
            gc_policy.end_quiet()
            assert not gc.isenabled()
        finally:
            gc.enable()
    asyncio.run(main())
