"""Group commit's follow-on rounds: the worker thread (kbroker.log.commit_chain), or the
completion of a native AIO fdatasync (kbroker.log.aio_fsync), fsyncs again while appends
arrive, and no append is answered before an fsync that started after its bytes were
written, in the file they were written to (segments roll under the rounds). Each test runs
on both paths."""

import asyncio
import os
import random
import threading
import time

import pytest

from kbroker.log import aio_fsync
from kbroker.log import partition_log as pl
from kbroker.log import fill_ahead

from .helpers import make_batch
from .test_partition_log import cfg, open_log


@pytest.fixture(autouse=True)
def _no_fill(monkeypatch):
    """These tests count and gate the log's fsyncs; the zero filler's are not group commit's."""
    monkeypatch.setattr(fill_ahead, "ZEROS", False)


class _Disk:
    """Spy on fsync/fdatasync, in threads and through native AIO. Appends are numbered as
    they are written; for each file (device, inode) ``synced`` keeps the highest number
    written before an fsync of that file started (and completed): those appends are on
    disk."""

    def __init__(self, monkeypatch, delay_s):
        self.written = 0
        self.synced: dict = {}
        self.calls: list = []
        monkeypatch.setattr(os, "fsync", self._wrap(os.fsync, delay_s))
        monkeypatch.setattr(os, "fdatasync", self._wrap(os.fdatasync, delay_s))
        monkeypatch.setattr(aio_fsync.AioFsync, "fdatasync", self._wrap_aio(aio_fsync.AioFsync.fdatasync, delay_s))

    def _wrap(self, real, delay_s):
        def spy(fd):
            st, upto = os.fstat(fd), self.written
            time.sleep(delay_s)   # a slow disk: appends arrive during each round
            real(fd)
            self._synced(st, upto)
        return spy

    def _wrap_aio(self, real, delay_s):
        def spy(aio, fd, callback):
            st, upto = os.fstat(fd), self.written

            def ended(errno):
                def report():
                    self._synced(st, upto)
                    callback(errno)
                asyncio.get_running_loop().call_later(delay_s, report)   # a slow disk
            real(aio, fd, ended)
        return spy

    def _synced(self, st, upto) -> None:
        key = (st.st_dev, st.st_ino)
        self.synced[key] = max(self.synced.get(key, 0), upto)

    def wrote(self, log):
        """After an append: its number and file."""
        self.written += 1
        st = os.fstat(log._segments[-1].handle.fileno())
        return (st.st_dev, st.st_ino), self.written

    def covers(self, mark) -> bool:
        return self.synced.get(mark[0], 0) >= mark[1]


def _count_started_rounds(monkeypatch) -> list:
    """Rounds the log's round loop started (the others followed on by themselves)."""
    started = []
    real, real_aio = pl._fsync_jobs, pl.PartitionLog._aio_rounds
    monkeypatch.setattr(pl, "_fsync_jobs", lambda jobs: (started.append(len(jobs)), real(jobs))[1])
    monkeypatch.setattr(pl.PartitionLog, "_aio_rounds",
                        lambda log, *a: (started.append(1), real_aio(log, *a))[1])
    return started


def test_no_append_is_answered_before_an_fsync_covers_it(tmp_path, monkeypatch, fsync_path):
    log = open_log(tmp_path, cfg(flush_messages=1, segment_bytes=2500))
    disk = _Disk(monkeypatch, 0.002)
    started = _count_started_rounds(monkeypatch)
    rng = random.Random(7)
    early = []

    async def one(end, mark):
        await log.sync(end)
        if not disk.covers(mark):
            early.append((end, mark, dict(disk.synced)))

    async def main():
        waits = []
        for _ in range(300):
            info = log.append(make_batch(rng.randint(1, 3)), 0)
            mark = disk.wrote(log)
            end = info.last_offset + 1
            log.sync_soon(end)   # as the leader's append does
            if log.awaits_sync(end):
                waits.append(asyncio.ensure_future(one(end, mark)))
            if rng.random() < 0.3:
                await asyncio.sleep(rng.choice((0, 0.001, 0.003)))
        await asyncio.gather(*waits)
        return len(waits)

    assert asyncio.run(main()) > 200
    assert not early, early[:3]
    assert len(log._segments) > 10                      # rounds ran across many rolls
    assert log.sync_rounds > len(started) > 0           # and the worker went on by itself


def test_a_truncation_during_a_follow_on_round(tmp_path, monkeypatch, fsync_path, submit_held):
    """The log is truncated and appended to again while a round that went on by itself
    runs: the new records below that round's end wait for a later fsync. (A thread's round
    is held before its fdatasync; an AIO round after its submission, so the records
    appended meanwhile are not in it.)"""
    log = open_log(tmp_path, cfg(flush_messages=1))
    disk = _Disk(monkeypatch, 0)
    started = _count_started_rounds(monkeypatch)
    gates = [(threading.Event(), threading.Event()) for _ in range(2)]
    real, real_aio = os.fdatasync, aio_fsync.AioFsync.fdatasync

    def gated(fd):
        n = len(disk.calls)
        disk.calls.append(fd)
        if n < 2:
            gates[n][0].set()
            gates[n][1].wait(10)
        real(fd)
    monkeypatch.setattr(os, "fdatasync", gated)

    def gated_aio(aio, fd, callback):
        n = len(disk.calls)
        disk.calls.append(fd)
        if n >= 2:
            return real_aio(aio, fd, callback)
        gates[n][0].set()
        submit_held(real_aio, aio, fd, callback, gates[n][1])
    monkeypatch.setattr(aio_fsync.AioFsync, "fdatasync", gated_aio)

    async def wait_for(event):
        for _ in range(5000):
            if event.is_set():
                return
            await asyncio.sleep(0.001)
        raise AssertionError("no fsync round started")

    async def main():
        log.append(make_batch(2), 0)
        disk.wrote(log)
        log.sync_soon(2)
        await wait_for(gates[0][0])              # round 1 (offsets 0..1) runs
        for _ in range(4):
            log.append(make_batch(2), 0)         # offsets 2..9
            disk.wrote(log)
            log.sync_soon(log.log_end_offset)
        gates[0][1].set()
        await wait_for(gates[1][0])              # the worker went on: round 2 (up to 10)
        log.truncate_to(4)
        info = log.append(make_batch(4), 0)      # offsets 4..7, below round 2's end
        mark = disk.wrote(log)
        log.sync_soon(8)
        waiter = asyncio.ensure_future(log.sync(8))
        gates[1][1].set()
        await waiter
        return disk.covers(mark), info.last_offset

    assert asyncio.run(main()) == (True, 7)
    assert len(disk.calls) == 3 and len(started) == 2   # round 2 followed on by itself


@pytest.mark.parametrize("err", [22, 11])
def test_a_refused_native_aio_fdatasync_gets_the_thread(tmp_path, monkeypatch, err):
    """io_submit refuses the fdatasync. EINVAL (a file without an fsync operation): the
    rounds run in the thread, and the log does not ask the kernel again. EAGAIN (the loop's
    context is full just now): that round runs in the thread, and the next one asks the
    kernel again. Either way every append is answered after its fsync."""
    monkeypatch.setenv("KBROKER_AIO_FSYNC", "1")
    log = open_log(tmp_path, cfg(flush_messages=1))
    disk = _Disk(monkeypatch, 0)
    refused, real = [], os.fdatasync

    def refuse(aio, fd, callback):
        refused.append(fd)
        raise OSError(err, "io_submit: " + os.strerror(err))
    monkeypatch.setattr(aio_fsync.AioFsync, "fdatasync", refuse)
    threads = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: (threads.append(fd), real(fd))[1])

    async def main():
        if aio_fsync.for_loop(asyncio.get_running_loop()) is None:
            pytest.skip("native AIO unavailable here (io_setup failed; see kbroker.log.aio_fsync)")
        marks = []
        for _ in range(3):
            info = log.append(make_batch(2), 0)
            marks.append(disk.wrote(log))
            await log.sync(info.last_offset + 1)
        return marks

    marks = asyncio.run(main())
    assert len(refused) == (1 if err == 22 else 3) and len(threads) >= 3
    assert log.sync_rounds >= 3 and log._durable_offset == 6
    assert all(disk.covers(m) for m in marks)
