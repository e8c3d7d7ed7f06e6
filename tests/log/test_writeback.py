"""Early write-out of an append's pages (kbroker.log.writeback): an append that waits for the
round after the fsync round in flight starts its own pages' write-out at once; one that
starts a round does not (the round's fdatasync writes them)."""

import asyncio
import os

from kbroker.log import writeback

from .helpers import make_batch
from .test_partition_log import cfg, open_log


def test_start_queues_a_real_files_pages(tmp_path):
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, b"x" * 65536, 0)
        assert writeback.start(fd, 0, 65536) is writeback.ENABLED
        os.fdatasync(fd)
        assert os.pread(fd, 4, 65532) == b"xxxx"
    finally:
        os.close(fd)
    assert writeback.start(fd, 0, 10) is False      # a closed descriptor: refused, no raise
    assert writeback.start(0, 0, 0) is False        # nothing to write


def test_an_append_behind_a_round_in_flight_starts_its_write_out(tmp_path, monkeypatch):
    calls = []
    real = writeback.start
    monkeypatch.setattr(writeback, "start", lambda fd, off, n: calls.append((off, n)) or real(fd, off, n))
    log = open_log(tmp_path, cfg(flush_messages=1))

    async def run():
        sizes = []
        for i in range(4):
            info = log.append(make_batch(2), 0)
            sizes.append(log.active_segment.size)
            log.sync_soon(info.last_offset + 1)
            if i == 0:
                # (the second append comes before the round's task has begun: that round
                # covers it, so it asks for nothing)
                continue
            if i == 1:
                await asyncio.sleep(0)      # the round begins
        await log.sync()
        return sizes
    sizes = asyncio.run(run())
    # the appends behind the round in flight asked for their own bytes
    assert calls == [(sizes[1], sizes[2] - sizes[1]), (sizes[2], sizes[3] - sizes[2])]
    assert not log.awaits_sync(log.log_end_offset)
    log.close()
