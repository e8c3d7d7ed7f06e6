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
