"""The bounded descriptor cache: old segments and index files open on demand and close when
the cache needs room; the active segment's log stays open; nothing read back changes."""

import collections
import gc
import os
import random
import resource
import threading
import time

import pytest

from kbroker.log import fd_cache, fill_ahead
from kbroker.log.config import LogConfig
from kbroker.log.cleaner import LogCleaner
from kbroker.log.fd_cache import DESCRIPTORS, FileHandle, raise_open_file_limit
from kbroker.log.partition_log import PartitionLog

from .helpers import concat, make_batch


def cfg(**kw):
    props = {k.replace("_", "."): str(v) for k, v in kw.items()}
    props.setdefault("file.delete.delay.ms", "0")
    return LogConfig.from_props(props)


def open_fds() -> int:
    """Descriptors open once the fill-ahead thread's queued jobs ran (a roll's trim holds a
    duplicate until then)."""
    fill_ahead._pool().submit(lambda: None).result(10)
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def small_cache(monkeypatch):
    monkeypatch.setattr(DESCRIPTORS, "capacity", fd_cache.MIN_CAPACITY)
    yield DESCRIPTORS


def fill(log, batches, now=0):
    for _ in range(batches):
        log.append(concat(make_batch(5, value=b"v" * 200)), now)


def test_many_logs_hold_one_descriptor_each_plus_the_cache(tmp_path, small_cache):
    before = open_fds()
    config = cfg(segment_bytes=2048, index_interval_bytes=100)
    logs = [PartitionLog.open(str(tmp_path / f"t-{i}"), config, 0) for i in range(40)]
    for log in logs:
        fill(log, 12)   # several rolled segments each, every one indexed
    assert all(len(log.segments) > 3 for log in logs)
    segments = sum(len(log.segments) for log in logs)
    held = open_fds() - before
    # without the cache: every segment's log and two indexes (x2 with memory maps)
    assert held <= len(logs) + small_cache.capacity + 2, (held, segments)
    expected = {id(log): [log.read(o, 1 << 20).to_bytes() for o in range(0, log.log_end_offset, 7)]
                for log in logs}
    # read everything again (old segments re-open; offset lookups read evicted indexes)
    for log in logs:
        got = [log.read(o, 1 << 20).to_bytes() for o in range(0, log.log_end_offset, 7)]
        assert got == expected[id(log)]
        assert log.offset_for_timestamp(0) is not None
    assert open_fds() - before <= len(logs) + small_cache.capacity + 2
    for log in logs:
        log.flush()
        log.close()
    # a clean reopen finds every index intact (no rebuild needed)
    for i in range(40):
        log = PartitionLog.open(str(tmp_path / f"t-{i}"), config, 0, had_clean_shutdown=True)
        assert not log.recovery.rebuilt_indexes
        log.close()
    assert open_fds() - before <= 2


def test_region_of_an_evicted_segment_reopens_at_send_time(tmp_path, small_cache):
    log = PartitionLog.open(str(tmp_path / "a-0"), cfg(segment_bytes=2048), 0)
    fill(log, 12)
    first = log.segments[0]
    region = log.read(0, 1 << 20).regions[0]
    assert region.file is first.handle
    want = region.read()
    # touch more files than the cache holds: the first segment's descriptor is closed
    others = [PartitionLog.open(str(tmp_path / f"b-{i}"), cfg(segment_bytes=2048), 0) for i in range(6)]
    for o in others:
        fill(o, 12)
        o.read(0, 1 << 20).to_bytes()
    assert not first.handle.is_open
    assert region.read() == want
    r_fd, w_fd = os.pipe()
    try:
        assert os.sendfile(w_fd, region.fd, region.position, region.size) == region.size
        assert os.read(r_fd, region.size) == want
    finally:
        os.close(r_fd)
        os.close(w_fd)


def test_active_segment_log_stays_open(tmp_path, small_cache):
    logs = [PartitionLog.open(str(tmp_path / f"t-{i}"), cfg(), 0) for i in range(3 * fd_cache.MIN_CAPACITY)]
    for log in logs:
        fill(log, 1)
    assert all(log.active_segment.handle.is_open for log in logs)
    assert len(small_cache) <= small_cache.capacity


def test_deleted_segment_region_stays_readable(tmp_path, small_cache):
    log = PartitionLog.open(str(tmp_path / "a-0"), cfg(segment_bytes=2048, retention_bytes=2048), 0)
    fill(log, 12)
    region = log.read(0, 1 << 20).regions[0]
    want = region.read()
    log.high_watermark = log.log_end_offset
    assert log.delete_old_segments(0) > 0
    assert log.log_start_offset > 0
    assert not os.path.exists(region.file.path)
    assert region.read() == want   # pinned before the unlink: the descriptor kept the file


def _deleted_files_open() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)") and ".log" in target:
            out.append(target)
    return out


def test_a_deleted_segments_last_close_runs_in_the_closer_thread(tmp_path, small_cache, monkeypatch):
    # that close frees the file's blocks (with `discard`, a wait for the device): never on
    # the thread that drops the last reference, which is the event loop's
    closed_by: dict[int, str] = {}

    def recording_close(fd):
        closed_by[fd] = threading.current_thread().name
        real_close(fd)

    real_close = fd_cache._close_fd
    monkeypatch.setattr(fd_cache, "_close_fd", recording_close)
    log = PartitionLog.open(str(tmp_path / "a-0"), cfg(segment_bytes=2048, retention_bytes=2048), 0)
    fill(log, 12)
    region = log.read(0, 1 << 20).regions[0]   # a fetch in flight holds the first segment
    want = region.read()
    log.high_watermark = log.log_end_offset
    assert log.delete_old_segments(0) > 1
    doomed_fd = region.file.fd
    assert region.read() == want
    del region
    deadline = time.monotonic() + 5
    while (_deleted_files_open() or doomed_fd not in closed_by) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _deleted_files_open() == []
    assert closed_by.get(doomed_fd) == "kbroker-fd-closer"
    assert threading.current_thread().name not in closed_by.values()
    log.close()


def test_no_descriptor_of_an_unlinked_file_closes_on_the_callers_thread(tmp_path, small_cache, monkeypatch):
    # two compactions within file.delete.delay.ms rename a segment of the same base offset
    # onto the same ``.deleted`` name, which unlinks the older one's files: the older log
    # stays open (else that rename frees its blocks on the caller's thread), and its close,
    # which frees them, is the closer thread's
    from .test_cleaner import compact_cfg, fill

    on_caller = []
    real_close = os.close

    def watching_close(fd):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.endswith(" (deleted)") and threading.current_thread() is threading.main_thread():
            on_caller.append(target)
        real_close(fd)

    monkeypatch.setattr(os, "close", watching_close)
    monkeypatch.setattr(FileHandle.__del__, "__defaults__", (watching_close,))
    log = PartitionLog.open(str(tmp_path / "c-0"), compact_cfg(file_delete_delay_ms=60_000), 0)
    rng = random.Random(3)
    for now in (2000, 4000, 6000):
        fill(log, rng, 200, now=now)
        log.roll(now)
        LogCleaner().clean(log, now)
    pending = collections.Counter(s.base_offset for s in log._pending_deletes)
    renamed_over = sum(n - 1 for n in pending.values())
    assert renamed_over > small_cache.capacity   # (more than the cache keeps open)
    assert len([t for t in _deleted_files_open() if ".log.deleted" in t]) == renamed_over
    assert log.delete_pending(10 ** 9) > 0
    gc.collect()
    assert on_caller == []
    log.close()


def test_raise_open_file_limit_sets_soft_to_hard(monkeypatch):
    calls = []
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (1024, 65536))
    monkeypatch.setattr(resource, "setrlimit", lambda _r, lim: calls.append(lim))
    monkeypatch.setattr(DESCRIPTORS, "capacity", DESCRIPTORS.capacity)
    assert raise_open_file_limit() == (65536, 65536)
    assert calls == [(65536, 65536)]
    assert DESCRIPTORS.capacity == 65536 // 4


def test_the_descriptor_table_is_reserved_in_one_step():
    """A new process's table holds 64 descriptors; after the reservation it holds what was
    asked, so later opens (a burst of accepts) never wait for it to grow."""
    import subprocess
    import sys
    code = ("from kbroker.log.fd_cache import reserve_descriptor_table\n"
            "def size():\n"
            "    return int(next(l for l in open('/proc/self/status') if l.startswith('FDSize:')).split()[1])\n"
            "before = size(); reserve_descriptor_table(4096); print(before, size())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    before, after = map(int, out.stdout.split())
    assert before < 4096 <= after
