"""The broker's cleaner runs in slices that yield to the event loop; a sliced pass compacts
exactly as a pass in one go, and stops cleanly when the segments change under it."""
import asyncio
import random

from kbroker.log.cleaner import LogCleaner
from kbroker.log.partition_log import PartitionLog

from .test_cleaner import compact_cfg, fill, records


def _twin_logs(tmp_path):
    logs = []
    for name in ("a-0", "b-0"):
        log = PartitionLog.open(str(tmp_path / name), compact_cfg(), 1000)
        fill(log, random.Random(7), 300)
        logs.append(log)
    return logs


def test_sliced_pass_yields_and_matches_a_pass_in_one_go(tmp_path):
    sync_log, sliced_log = _twin_logs(tmp_path)
    expected = LogCleaner().clean(sync_log, 5000)
    assert expected.records_removed > 0

    async def main():
        ticks = [0]
        stop = asyncio.Event()

        async def other_client():
            while not stop.is_set():
                ticks[0] += 1
                await asyncio.sleep(0)
        t = asyncio.create_task(other_client())
        stats = await LogCleaner().clean_async(sliced_log, 5000, slice_s=0)   # yield after every step
        stop.set()
        await t
        return stats, ticks[0]
    stats, ticks = asyncio.run(main())
    assert ticks > 100                      # the other coroutine ran between slices
    assert stats == expected
    assert records(sliced_log) == records(sync_log)
    assert sliced_log.first_dirty_offset == sync_log.first_dirty_offset
    sync_log.close()
    sliced_log.close()


def test_segments_changed_between_slices_stops_the_pass(tmp_path, caplog):
    caplog.set_level("INFO", logger="kbroker.log.cleaner")
    log, _other = _twin_logs(tmp_path)
    before = records(log)
    steps = LogCleaner().clean_steps(log, 5000)
    next(steps)                                  # the pass has started (offset map)
    log.high_watermark = log.log_end_offset
    log.delete_records(log.segments[2].base_offset)
    log.delete_old_segments(5000)                # retention removes the first segments
    try:
        while True:
            next(steps)
    except StopIteration:
        pass
    assert "segments changed during compaction" in caplog.text
    after = records(log)
    start = log.log_start_offset
    # nothing below the new start; above it, compaction may have run on untouched groups only
    assert after and after[0][0] >= start and {o for o, _k, _v in after} <= {o for o, _k, _v in before}
    assert not [n for n in __import__("os").listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
    log.close()


def test_a_large_batch_is_cleaned_in_several_steps(tmp_path):
    """A batch of 1,000 records is decoded, filtered and re-encoded in steps of at most
    RECORDS_PER_STEP records (a 1 MiB batch in one step held the loop 2-4 ms)."""
    from kbroker.log.cleaner import RECORDS_PER_STEP
    from kbroker.wire.records import BatchBuilder

    log = PartitionLog.open(str(tmp_path / "big-0"), compact_cfg(**{"segment_bytes": 1 << 20}), 1000)
    for rnd in range(2):
        bb = BatchBuilder(base_offset=0)
        for i in range(1000):
            bb.append(key=b"k%d" % (i % 700), value=b"v%d-%d" % (rnd, i), timestamp=1000, offset=i)
        log.append(bb.build(), 1000)
    log.roll(1000)
    log.high_watermark = log.log_end_offset
    steps = LogCleaner().clean_steps(log, 5000)
    n = 0
    try:
        while True:
            assert next(steps) is None   # no IO thread here: the fsync runs in the step
            n += 1
    except StopIteration as done:
        stats = done.value
    assert stats.records_removed == 2000 - 700
    # batch by batch it would be ~6 steps (two to map, two for the producers, two to filter)
    assert n >= 3 * 2000 // RECORDS_PER_STEP
    assert [(o, k) for o, k, _v in records(log)] == [(o, b"k%d" % ((o - 1000) % 700)) for o in range(1300, 2000)]
    log.close()


def test_the_cleaned_segment_is_fsynced_off_the_loop(tmp_path, monkeypatch):
    """With an IO thread (as in the broker), the pass hands the cleaned segment's fsync to
    it and sits out until it is done; the event loop's thread never fsyncs."""
    import os
    import threading

    from kbroker.log.background import BackgroundIO

    log, _other = _twin_logs(tmp_path)
    log.io = BackgroundIO()
    fsync_threads = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        fsync_threads.append(threading.current_thread().name)
        return real_fsync(fd)
    monkeypatch.setattr(os, "fsync", recording_fsync)

    async def main():
        loop_thread = threading.current_thread().name
        stats = await LogCleaner().clean_async(log, 5000)
        return loop_thread, stats
    try:
        loop_thread, stats = asyncio.run(main())
    finally:
        log.io.close()
    assert stats.records_removed > 0
    assert fsync_threads and loop_thread not in fsync_threads
    assert not [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap"))]
    log.close()
