"""Fsyncs and checkpoint writes in the log's IO thread (kbroker.log.background)."""
import asyncio
import os
import threading

from kbroker.log.background import BackgroundIO
from kbroker.log.checkpoint import (LEADER_EPOCH_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, PARTITION_METADATA,
                                     RECOVERY_POINT_CHECKPOINT)
from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager

from .helpers import make_batch


def _count_loop_fsyncs(monkeypatch):
    main = threading.get_ident()
    calls = {"loop": 0, "io": 0}
    real = os.fsync

    def counting(fd):
        calls["loop" if threading.get_ident() == main else "io"] += 1
        return real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_partition_creation_does_not_fsync_on_the_calling_thread(tmp_path, monkeypatch):
    lm = LogManager([str(tmp_path)])
    lm.start_background_io()
    calls = _count_loop_fsyncs(monkeypatch)
    for p in range(50):
        plog = lm.get_or_create("__consumer_offsets", p, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
        plog.append(make_batch(1), 0, leader_epoch=0)   # first append: leader-epoch checkpoint
    assert calls["loop"] == 0
    lm.io.drain()
    assert calls["io"] > 0
    d = tmp_path / "__consumer_offsets-7"
    assert (d / PARTITION_METADATA).read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n"
    assert (d / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n0 0\n"
    lm.shutdown()
    lm2 = LogManager([str(tmp_path)])
    assert lm2.get("__consumer_offsets", 7).leader_epoch_cache.entries == [(0, 0)]
    lm2.shutdown()


def test_rolled_segments_fsynced_in_the_io_thread_before_the_recovery_point_moves(tmp_path, monkeypatch):
    cfg = LogConfig.from_props({"segment.bytes": "300", "file.delete.delay.ms": "0"})
    lm = LogManager([str(tmp_path)], cfg)
    lm.start_background_io()
    plog = lm.get_or_create("t", 0)
    for _ in range(6):
        plog.append(make_batch(2, value=b"x" * 100), 0)
    assert plog.num_segments > 2 and plog.recovery_point == 0
    calls = _count_loop_fsyncs(monkeypatch)
    started = plog.start_flush_rolled()
    assert started is not None and plog.recovery_point == 0   # not before the fsync completed
    segs, fut = started
    fut.result()
    plog.finish_flush_rolled(segs, True)
    assert plog.recovery_point == plog.active_segment.base_offset
    assert calls["loop"] == 0 and calls["io"] >= len(segs)
    plog.append(make_batch(2, value=b"x" * 100), 0)
    plog.append(make_batch(2, value=b"x" * 100), 0)
    assert asyncio.run(lm.run_flush_async(0)) == 1
    assert calls["loop"] == 0
    lm.io.drain()
    text = (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text()
    assert text == f"0\n1\nt 0 {plog.active_segment.base_offset}\n"
    lm.shutdown()


def test_rolled_segment_deleted_while_its_fsync_is_queued(tmp_path):
    cfg = LogConfig.from_props({"segment.bytes": "300", "file.delete.delay.ms": "0",
                                "retention.bytes": "1"})
    lm = LogManager([str(tmp_path)], cfg)
    lm.start_background_io()
    plog = lm.get_or_create("t", 0)
    for _ in range(4):
        plog.append(make_batch(2, value=b"x" * 100), 0)
    gate = threading.Event()
    lm.io.submit(gate.wait)          # hold the IO thread
    segs, fut = plog.start_flush_rolled()
    plog.high_watermark = plog.log_end_offset
    assert plog.delete_old_segments(0) > 0   # retention closes and removes them meanwhile
    gate.set()
    fut.result()                     # the duplicated descriptors kept the fsync valid
    plog.finish_flush_rolled(segs, True)
    lm.shutdown()


def test_late_write_never_lands_in_a_recreated_directory(tmp_path):
    io = BackgroundIO()
    d = tmp_path / "t-0"
    d.mkdir()
    gate = threading.Event()
    io.submit(gate.wait)
    io.write_file(str(d), "leader-epoch-checkpoint", "old\n")
    os.rename(d, tmp_path / "t-0.x-delete")   # the partition is deleted ...
    d.mkdir()                                   # ... and created again
    io.write_file(str(d), "leader-epoch-checkpoint", "new\n")
    gate.set()
    io.close()
    assert (d / "leader-epoch-checkpoint").read_text() == "new\n"
    # the write for the deleted partition is dropped, not written into its renamed directory
    assert not (tmp_path / "t-0.x-delete" / "leader-epoch-checkpoint").exists()


def test_queued_writes_of_one_file_coalesce(tmp_path):
    io = BackgroundIO()
    gate = threading.Event()
    io.submit(gate.wait)
    f1 = io.write_file(str(tmp_path), "cp", "1\n")
    f2 = io.write_file(str(tmp_path), "cp", "2\n")
    assert f1 is f2
    gate.set()
    f2.result()
    assert (tmp_path / "cp").read_text() == "2\n"
    assert not (tmp_path / "cp.tmp").exists()
    io.close()


def test_a_text_given_as_a_function_is_rendered_in_the_io_thread(tmp_path):
    """A large checkpoint's formatting leaves the loop: only the newest function of a file
    queued several times runs, and it runs in the IO thread."""
    io = BackgroundIO()
    gate = threading.Event()
    io.submit(gate.wait)
    ran = []

    def render(text):
        def f():
            ran.append((text, threading.current_thread() is threading.main_thread()))
            return text
        return f
    io.write_file(str(tmp_path), "cp", render("1\n"))
    fut = io.write_file(str(tmp_path), "cp", render("2\n"))
    gate.set()
    fut.result()
    io.close()
    assert (tmp_path / "cp").read_text() == "2\n"
    assert ran == [("2\n", False)]


def test_queued_per_partition_files_are_written_in_one_batch(tmp_path, monkeypatch):
    from kbroker.log import background

    syncs = []
    real = background._syncfs
    monkeypatch.setattr(background, "_syncfs", lambda fd: (syncs.append(fd), real(fd)))
    io = BackgroundIO()
    gate = threading.Event()
    io.submit(gate.wait)
    dirs = []
    futs = []
    for i in range(50):
        d = tmp_path / f"t-{i}"
        d.mkdir()
        dirs.append(d)
        futs.append(io.write_file(str(d), "partition.metadata", f"id {i}\n"))
        futs.append(io.write_file(str(d), "leader-epoch-checkpoint", f"0\n1\n0 {i}\n"))
    gone = tmp_path / "t-0"
    os.rename(gone, tmp_path / "t-0.x-delete")   # deleted while queued: its files are dropped
    gate.set()
    for f in futs:
        f.result()
    io.close()
    for i, d in enumerate(dirs[1:], 1):
        assert (d / "partition.metadata").read_text() == f"id {i}\n"
        assert (d / "leader-epoch-checkpoint").read_text() == f"0\n1\n0 {i}\n"
        assert not any(p.name.endswith(".tmp") for p in d.iterdir())
    assert not (tmp_path / "t-0.x-delete" / "partition.metadata").exists()
    assert len(syncs) == 2   # one batch: data, then renames (instead of 3 fsyncs per file)


def test_offsets_checkpoint_goes_to_the_log_dirs_io_thread(tmp_path, monkeypatch):
    from kbroker.log import checkpoint

    lm = LogManager([str(tmp_path)], LogConfig(), now_ms=0)
    lm.start_background_io()
    threads = []
    from kbroker.log import background

    orig = background.write_atomic_at

    def spy(dfd, name, text):
        threads.append(threading.current_thread() is threading.main_thread())
        return orig(dfd, name, text)

    monkeypatch.setattr(background, "write_atomic_at", spy)
    checkpoint.write_offsets(str(tmp_path), "replication-offset-checkpoint", {("t", 0): 5})
    lm.io.drain()
    assert threads == [False]   # written by the IO thread, not the caller's
    assert checkpoint.OffsetCheckpointFile(str(tmp_path / "replication-offset-checkpoint")).read() == {("t", 0): 5}
    lm.shutdown()
    # without the IO thread: written at once
    checkpoint.write_offsets(str(tmp_path), "replication-offset-checkpoint", {("t", 0): 7})
    assert checkpoint.OffsetCheckpointFile(str(tmp_path / "replication-offset-checkpoint")).read() == {("t", 0): 7}


def test_offsets_checkpoint_reads_the_logs_in_the_io_thread_when_it_writes(tmp_path):
    # Deleting a topic checkpoints every log's offsets. Reading 10,000 logs took the loop
    # 3-5 ms per deleted topic, so the IO thread reads them when it writes the file: a value
    # changed and a log deleted after the call are what the file shows.
    lm = LogManager([str(tmp_path)], LogConfig(), now_ms=0)
    lm.start_background_io()
    for p in range(3):
        lm.get_or_create("t", p).append(make_batch(5), 0)
    gate = threading.Event()
    lm.io.submit(gate.wait)                             # hold the IO thread
    lm.checkpoint_after_deletes()
    lm.get("t", 1).flush()                              # recovery point 0 -> 5 after the call
    lm.delete_many([("t", 2)], 0, checkpoint=False)     # gone before the write
    gate.set()
    lm.io.drain()
    assert (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n2\nt 0 0\nt 1 5\n"
    assert (tmp_path / LOG_START_OFFSET_CHECKPOINT).read_text() == "0\n2\nt 0 0\nt 1 0\n"
    lm.shutdown()
