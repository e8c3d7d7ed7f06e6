"""Space made ahead of an active segment's appends (kbroker.log.fill_ahead): zeros for a
group-commit log (the file longer than the log only while the segment is active), blocks
allocated past the end for any other (released at the roll and close). Reads and recovery see
the log alone, and the filler never overwrites bytes the log wrote."""

import concurrent.futures
import os
import random
import threading
import time

import pytest

from kbroker.log import fill_ahead
from kbroker.log.fill_ahead import FillAhead

from .helpers import make_batch
from .test_partition_log import cfg, open_log, read_all


def _wait_for_fill(log):
    zf = log.active_segment._fill
    if zf is not None and zf._job is not None:
        concurrent.futures.wait([zf._job], timeout=10)   # (a failed job is the next append's to see)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(fill_ahead, "CHUNK", 64 << 10)
    monkeypatch.setattr(fill_ahead, "MIN_CHUNK", 16 << 10)
    monkeypatch.setattr(fill_ahead, "STEP", 4 << 10)


def test_a_group_commit_log_writes_zeros_ahead_and_trims_them_at_the_roll(tmp_path, small_chunks):
    c = cfg(flush_messages=1, segment_bytes=200_000)
    log = open_log(tmp_path, c)
    first = log.active_segment
    log.append(make_batch(3), 0)
    _wait_for_fill(log)
    on_disk = os.path.getsize(first.path)
    assert on_disk == first.size + (16 << 10)            # the first, smallest job of zeros
    with open(first.path, "rb") as f:
        f.seek(first.size)
        assert f.read() == bytes(on_disk - first.size)
    ahead = []
    while log.active_segment is first:
        log.append(make_batch(20, value=b"v" * 200), 0)
        _wait_for_fill(log)
        ahead.append(os.path.getsize(first.path) - first.size)
    assert max(ahead) > 32 << 10                         # jobs grew with the file, up to CHUNK
    assert max(ahead) <= (64 << 10) * 3 // 2            # (a job starts with half of one left)
    assert os.path.getsize(first.path) == first.size     # trimmed when it rolled
    data = read_all(log)
    log.close()
    assert os.path.getsize(log.active_segment.path) == log.active_segment.size   # and at close
    again = open_log(tmp_path, c, had_clean_shutdown=True)
    assert read_all(again) == data
    again.close()


def _no_zeros_written(monkeypatch):
    def never(fd, pos, size):
        raise AssertionError("zeros written for a log that does not fsync every append")
    monkeypatch.setattr(fill_ahead, "_pwrite_zeros", never)


def _allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def _blocks_for(size: int) -> int:
    """What a file of ``size`` bytes holds on disk with nothing past its end (and room for
    two blocks of the filesystem's own extent index)."""
    return -(-size // 4096) * 4096 + 8192


def test_any_other_log_gets_blocks_allocated_past_its_end_and_released_at_the_roll(tmp_path, small_chunks, monkeypatch):
    _no_zeros_written(monkeypatch)
    syncs = []
    real_sync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real_sync(fd)))
    c = cfg(segment_bytes=600_000)
    log = open_log(tmp_path, c)
    first = log.active_segment
    log.append(make_batch(3), 0)
    _wait_for_fill(log)
    assert first._fill is not None and not first._fill.zeros
    assert os.path.getsize(first.path) == first.size                 # the length stays the log's
    assert _allocated(first.path) >= first.size + (64 << 10)         # the first, smallest allocation
    ahead = []
    while log.active_segment is first:
        log.append(make_batch(20, value=b"v" * 400), 0)
        _wait_for_fill(log)
        assert os.path.getsize(first.path) == first.size
        ahead.append(_allocated(first.path) - first.size)
    assert max(ahead) > 64 << 10                                     # grew with the segment
    assert _allocated(first.path) <= _blocks_for(first.size)          # released when it rolled
    assert syncs == []                                               # allocation alone: nothing fsynced
    data = read_all(log)
    active = log.active_segment
    assert _allocated(active.path) > _blocks_for(active.size)
    log.close()
    assert _allocated(active.path) <= _blocks_for(active.size)        # and at close
    again = open_log(tmp_path, c, had_clean_shutdown=True)
    assert read_all(again) == data
    again.close()


def test_allocation_never_changes_what_the_log_wrote(tmp_path, small_chunks, monkeypatch):
    """Appends keep going while allocation jobs run over the range they write into."""
    _no_zeros_written(monkeypatch)
    monkeypatch.setattr(fill_ahead, "ALLOCATE_MIN_CHUNK", 4 << 10)
    log = open_log(tmp_path, cfg(segment_bytes=10_000_000))
    rng = random.Random(7)
    expected = []
    for i in range(300):
        n, value = 1 + rng.randrange(4), bytes([65 + i % 26]) * rng.randrange(50, 900)
        log.append(make_batch(n, value=value), 0)
        expected.append([value] * n)
    _wait_for_fill(log)
    assert [[r.value for r in b.records()] for b in log.batches(0)] == expected
    log.close()


def test_allocation_ahead_can_be_turned_off(tmp_path, small_chunks, monkeypatch):
    monkeypatch.setattr(fill_ahead, "ALLOCATE", False)
    log = open_log(tmp_path, cfg(segment_bytes=200_000))
    log.append(make_batch(3), 0)
    assert log.active_segment._fill is None
    assert _allocated(log.active_segment.path) <= _blocks_for(log.active_segment.size)
    log.close()


def test_a_filesystem_without_fallocate_is_reported_once_and_appends_go_on(tmp_path, small_chunks, monkeypatch, caplog):
    monkeypatch.setattr(fill_ahead, "_fallocate", None)
    monkeypatch.setattr(fill_ahead, "_refusals_logged", set())
    c = cfg(segment_bytes=200_000)
    logs = [open_log(tmp_path / f"p{i}", c) for i in range(2)]
    with caplog.at_level("INFO", logger="kbroker.log.fill_ahead"):
        for _ in range(3):
            for log in logs:
                log.append(make_batch(2), 0)
                _wait_for_fill(log)
    assert all(log.active_segment._fill.stopped for log in logs)
    assert all(os.path.getsize(log.active_segment.path) == log.active_segment.size for log in logs)
    assert sum("no space allocated ahead" in r.getMessage() for r in caplog.records) == 1
    for log in logs:
        assert log.log_end_offset == 6
        log.close()


def test_after_a_crash_the_log_is_whole_and_the_blocks_left_past_it_are_released(tmp_path, small_chunks):
    c = cfg(segment_bytes=1_000_000)
    log = open_log(tmp_path, c)
    for i in range(40):
        log.append(make_batch(1 + i % 5, value=b"x" * 300), 0)
        _wait_for_fill(log)
    data, end, path = read_all(log), log.log_end_offset, log.active_segment.path
    assert _allocated(path) > _blocks_for(len(data))
    log.close_without_trim()                             # as kill -9 leaves it
    log = open_log(tmp_path, c)
    rep = log.recovery
    assert rep.dropped_bytes == 0 and not rep.damaged, rep          # nothing to cut: the length is the log's
    assert read_all(log) == data and log.log_end_offset == end
    assert log.append(make_batch(1), 0).first_offset == end
    log.close()
    assert _allocated(path) <= _blocks_for(os.path.getsize(path))    # released at the close


def test_recovery_after_a_crash_cuts_the_zeros_and_keeps_every_append(tmp_path, small_chunks):
    c = cfg(flush_messages=1, segment_bytes=1_000_000)
    log = open_log(tmp_path, c)
    for i in range(40):
        log.append(make_batch(1 + i % 5, value=b"x" * 300), 0)
        _wait_for_fill(log)
    data, end = read_all(log), log.log_end_offset
    assert os.path.getsize(log.active_segment.path) > len(data)
    log.close_without_trim()                             # as kill -9 leaves it
    log = open_log(tmp_path, c)
    rep = log.recovery
    assert rep.zero_tail_bytes == rep.dropped_bytes > 0 and not rep.damaged, rep
    assert read_all(log) == data and log.log_end_offset == end
    assert log.append(make_batch(1), 0).first_offset == end
    log.close()


def test_a_truncation_stops_the_filler_and_appends_go_on_from_the_new_end(tmp_path, small_chunks):
    c = cfg(flush_messages=1, segment_bytes=1_000_000)
    log = open_log(tmp_path, c)
    for _ in range(30):
        log.append(make_batch(2, value=b"y" * 500), 0)
    log.truncate_to(20)
    _wait_for_fill(log)
    assert log.active_segment._fill is None         # a new one starts with the next append
    for _ in range(30):
        log.append(make_batch(2, value=b"z" * 500), 0)
        _wait_for_fill(log)
    assert [b.base_offset for b in log.batches(0)] == list(range(0, 80, 2))
    log.close()


def _roll_first_segment(log):
    first = log.active_segment
    while log.active_segment is first:
        log.append(make_batch(20, value=b"v" * 400), 0)
    return first


def test_a_roll_trims_the_file_on_the_fill_ahead_thread(tmp_path, small_chunks, monkeypatch):
    # the truncation that releases blocks waits for the device's discard where the
    # filesystem has it: not on the thread that appends (the event loop's)
    trims = []
    real = os.ftruncate
    monkeypatch.setattr(os, "ftruncate", lambda fd, size: (
        trims.append((os.readlink(f"/proc/self/fd/{fd}"), threading.current_thread().name)),
        real(fd, size))[1])
    log = open_log(tmp_path, cfg(segment_bytes=300_000))
    first = _roll_first_segment(log)
    log.append(make_batch(3), 0)
    _wait_for_fill(log)        # (queued behind the trim, on the same thread)
    on_first = [name for path, name in trims if path == first.path]
    assert on_first and all(n.startswith("kbroker-fill-ahead") for n in on_first), trims
    assert _allocated(first.path) <= _blocks_for(first.size)
    log.close()


def test_a_roll_cuts_the_zeros_before_it_returns(tmp_path, small_chunks, monkeypatch):
    # zeros past a rolled segment's end read, after a crash, as a log that ends there:
    # recovery would drop every later segment, acknowledged appends with them
    real = fill_ahead._truncate
    monkeypatch.setattr(fill_ahead, "_truncate", lambda fd, size: (time.sleep(0.3), real(fd, size)))
    log = open_log(tmp_path, cfg(flush_messages=1, segment_bytes=200_000))
    first = log.active_segment
    log.append(make_batch(3), 0)
    _wait_for_fill(log)
    assert os.path.getsize(first.path) > first.size     # zeros ahead
    log.roll(0)
    assert os.path.getsize(first.path) == first.size
    log.append(make_batch(3), 0)
    expected = read_all(log)
    log.close_without_trim()                             # as kill -9 leaves it
    again = open_log(tmp_path, cfg(flush_messages=1, segment_bytes=200_000))
    assert read_all(again) == expected
    again.close()


@pytest.mark.parametrize("to", ["inside", "at the end"])
def test_a_truncation_after_a_roll_waits_for_its_trim(tmp_path, small_chunks, monkeypatch, to):
    # a late trim to the length at the roll would cut what the segment holds after a
    # truncation made it the active one again, or lengthen it over the new end
    real = fill_ahead._truncate
    monkeypatch.setattr(fill_ahead, "_truncate", lambda fd, size: (time.sleep(0.3), real(fd, size)))
    for zeros in (False, True):
        d = tmp_path / str(zeros)
        c = cfg(segment_bytes=1_000_000, flush_messages=1 if zeros else 1 << 62)
        log = open_log(d, c)
        for _ in range(6):
            log.append(make_batch(20, value=b"v" * 400), 0)
        first = log.active_segment
        log.roll(0)
        log.append(make_batch(20, value=b"x" * 400), 0)
        if not zeros:   # (zeros ahead are cut at the roll itself; blocks, later)
            assert first._trim_job is not None and not first._trim_job.done()
        cut = 60 if to == "inside" else first.next_offset
        assert log.truncate_to(cut)
        assert log.active_segment is first and log.log_end_offset == cut
        for _ in range(8):   # past the length it had at the roll
            log.append(make_batch(20, value=b"w" * 400), 0)
        expected = read_all(log)
        fill_ahead._pool().submit(lambda: None).result(10)   # every queued job has run
        if zeros:   # (active again: zeros may be written ahead of it)
            assert os.path.getsize(first.path) >= first.size
        else:
            assert os.path.getsize(first.path) == first.size
        assert read_all(log) == expected
        log.close()
        again = open_log(d, c, had_clean_shutdown=True)
        assert read_all(again) == expected
        again.close()


def test_the_filler_never_overwrites_what_the_log_wrote(tmp_path, monkeypatch):
    """Appends race a filler whose every step is slow: an append that reaches into the
    range being filled must not be overwritten by that step's zeros."""
    monkeypatch.setattr(fill_ahead, "CHUNK", 256 << 10)
    monkeypatch.setattr(fill_ahead, "MIN_CHUNK", 64 << 10)
    monkeypatch.setattr(fill_ahead, "STEP", 8 << 10)
    real = fill_ahead._pwrite_zeros

    def slow(fd, position, size):
        time.sleep(0.0005)        # the step decided where to write; appends go on meanwhile
        real(fd, position, size)
    monkeypatch.setattr(fill_ahead, "_pwrite_zeros", slow)
    path = str(tmp_path / "f")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    rng = random.Random(11)
    zf = FillAhead(0, zeros=True)
    written = bytearray()
    try:
        while len(written) < (2 << 20):
            chunk = bytes([rng.randrange(1, 256)]) * rng.randrange(100, 6000)
            zf.claim(len(written) + len(chunk))
            os.pwrite(fd, chunk, len(written))
            written += chunk
            zf.ahead(4 << 20, fd)
            if rng.random() < 0.2:
                time.sleep(0.0002)
        zf.stop()
        if zf._job is not None:
            zf._job.result(timeout=10)
        with open(path, "rb") as f:
            got = f.read(len(written))
        bad = next((i for i in range(len(written)) if got[i] != written[i]), None)
        assert bad is None, f"byte {bad} of {len(written)} was overwritten"
    finally:
        os.close(fd)


def test_an_append_takes_no_lock_while_no_fill_runs():
    """``claim`` takes the lock only when it reaches into a running job."""
    zf = FillAhead(0, zeros=True)
    zf.lock.acquire()             # as a step in progress would hold it
    try:
        done = threading.Event()
        threading.Thread(target=lambda: (zf.claim(10), done.set())).start()
        assert done.wait(2)       # no job: no lock
    finally:
        zf.lock.release()


def test_a_failed_fill_is_not_retried_for_that_file(tmp_path, monkeypatch, caplog):
    def full(fd, position, size):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fill_ahead, "_pwrite_zeros", full)
    path = str(tmp_path / "f")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        zf = FillAhead(0, zeros=True)
        zf.claim(100)
        zf.ahead(1 << 30, fd)
        zf._job.exception(timeout=10)
        zf.ahead(1 << 30, fd)          # collects the failure
        assert zf.stopped and zf._job is None
        zf.ahead(1 << 30, fd)
        assert zf._job is None         # no new job
        assert "not retried" in caplog.text
    finally:
        os.close(fd)


def test_the_cleaners_segments_get_no_zeros(tmp_path, small_chunks, monkeypatch):
    """Compacting a group-commit log writes its cleaned segments with appends too; they are
    not the log's live file (no fsync waits on them), so nothing is filled ahead of them."""
    from kbroker.log.cleaner import LogCleaner

    c = cfg(flush_messages=1, segment_bytes=1500, cleanup_policy="compact",
            min_cleanable_dirty_ratio="0.0", index_interval_bytes=200)
    log = open_log(tmp_path, c)
    for i in range(40):
        log.append(make_batch(2, keys=[b"k%d" % (i % 3)] * 2, values=[b"v%d" % i] * 2), 0)
    log.high_watermark = log.log_end_offset
    _wait_for_fill(log)
    filled = []
    real = fill_ahead.FillAhead

    def recording(size, zeros):
        zf = real(size, zeros)
        filled.append(zf)
        return zf
    monkeypatch.setattr(fill_ahead, "FillAhead", recording)
    stats = LogCleaner().clean(log, 5000)
    assert stats.records_removed > 0
    assert filled == []
    log.close()


def test_each_step_of_zeros_is_fsynced_before_the_next_is_written(tmp_path, small_chunks, monkeypatch):
    """An append's fdatasync writes out every dirty page of the file, zeros ahead of the log
    included: the filler leaves at most one step of them unsynced (fsyncing once per job left
    up to a whole job for the appends' fsyncs to write)."""
    events = []   # the filler thread's own writes and fsyncs (the log's flushes are not it)
    real_write, real_sync = fill_ahead._pwrite_zeros, os.fdatasync

    def mine(kind):
        if threading.current_thread().name.startswith("kbroker-fill-ahead"):
            events.append(kind)

    def zeros(fd, pos, size):
        mine("zeros")
        return real_write(fd, pos, size)

    def sync(fd):
        mine("sync")
        return real_sync(fd)
    monkeypatch.setattr(fill_ahead, "_pwrite_zeros", zeros)
    monkeypatch.setattr(os, "fdatasync", sync)
    log = open_log(tmp_path, cfg(flush_messages=1, segment_bytes=200_000))
    for _ in range(12):
        log.append(make_batch(20, value=b"v" * 200), 0)
        _wait_for_fill(log)
    assert events.count("zeros") > 10
    assert all(events[i + 1] == "sync" for i, k in enumerate(events) if k == "zeros")
    log.close()


def test_a_zero_fill_job_allocates_its_blocks_before_it_takes_the_lock(tmp_path, small_chunks, monkeypatch):
    """The steps of zeros write into blocks allocated first, outside the lock: a step that
    allocated held the lock, and an append reaching into it, while a busy journal committed."""
    calls = []
    real = fill_ahead._fallocate

    def recording(fd, mode, start, length):
        calls.append((log.active_segment._fill.lock.locked(), mode, length))
        return real(fd, mode, start, length)
    monkeypatch.setattr(fill_ahead, "_fallocate", recording)
    log = open_log(tmp_path, cfg(flush_messages=1, segment_bytes=200_000))
    for _ in range(12):
        log.append(make_batch(20, value=b"v" * 200), 0)
        _wait_for_fill(log)
    assert calls and all(not locked and mode == fill_ahead._KEEP_SIZE for locked, mode, _ in calls)
    assert sum(length for *_, length in calls) >= os.path.getsize(log.active_segment.path) - (16 << 10)
    log.close()
