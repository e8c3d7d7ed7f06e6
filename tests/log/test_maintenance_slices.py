"""Log maintenance walks every log (retention, rolled-segment flushes, the cleaner's choice
of logs and its checkpoint): with 10,000 partitions each walk held the event loop for tens of
milliseconds every check interval. The async forms run in slices: other tasks run between
the logs (slices of 0 s here, so every step yields)."""

import asyncio

import pytest

from kbroker import slices
from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager

from .helpers import make_batch
from tests.loop_ticks import with_ticker

N = 30


@pytest.fixture
def lm(tmp_path, monkeypatch):
    monkeypatch.setattr(slices, "SLICE_S", 0.0)
    m = LogManager([str(tmp_path)], LogConfig.from_props({"segment.bytes": "300", "retention.bytes": "600"}))
    for i in range(N):
        plog = m.get_or_create("t", i)
        for _ in range(6):
            plog.append(make_batch(2, value=b"x" * 100), 0)
        plog.high_watermark = plog.log_end_offset     # retention deletes only below it
    m.start_background_io()   # as the broker runs it: rolled segments fsynced by the IO thread
    m.get_or_create("c", 0, LogConfig.from_props({"cleanup.policy": "compact"}))
    yield m
    m.shutdown()


def test_retention_pass_yields_between_logs(lm):
    stats, ticks = asyncio.run(with_ticker(lm.run_retention_async(10**13)))
    assert stats.segments_deleted >= N and all(lm.get("t", i).log_start_offset > 0 for i in range(N))
    assert ticks >= N      # the old pass was one synchronous call: no other task ran in it


def test_flush_and_cleaner_walks_yield_between_logs(lm):
    async def both():
        n, t1 = await with_ticker(lm.run_flush_async(0))
        _stats, t2 = await with_ticker(lm.run_cleaner_async(0, max_logs=1))
        return n, t1, t2
    n, t_flush, t_clean = asyncio.run(both())
    assert n == N          # every log had rolled segments to fsync
    assert t_flush >= N and t_clean >= N


def test_each_calls_in_order_and_yields():
    seen = []

    async def main():
        return await with_ticker(slices.run_in_slices(slices.each(range(10), seen.append), 0.0))
    _r, ticks = asyncio.run(main())
    assert seen == list(range(10)) and ticks >= 10


def test_many_segments_of_one_log_are_deleted_a_few_a_step(tmp_path, monkeypatch):
    """DeleteRecords to the end of a log of 300 segments, then retention: deleting them all in
    one step held the loop ~10 ms; now RETENTION_STEP_SEGMENTS a step, the same end result."""
    monkeypatch.setattr(slices, "SLICE_S", 0.0)
    monkeypatch.setattr(LogManager, "RETENTION_STEP_SEGMENTS", 4)
    m = LogManager([str(tmp_path)], LogConfig.from_props({"segment.bytes": "300"}))
    m.start_background_io()
    plog = m.get_or_create("segs", 0)
    for _ in range(40):
        plog.append(make_batch(2, value=b"x" * 100), 0)
    plog.high_watermark = plog.log_end_offset
    segs = plog.num_segments
    assert segs >= 39
    plog.maybe_increment_log_start_offset(plog.log_end_offset)     # DeleteRecords
    try:
        stats, ticks = asyncio.run(with_ticker(m.run_retention_async(0)))
        assert stats.segments_deleted == segs - 1 and plog.num_segments == 1
        assert ticks >= (segs - 1) // 4
    finally:
        m.shutdown()
