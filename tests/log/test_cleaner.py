import os
import random

import pytest

from kbroker.log.cleaner import LogCleaner
from kbroker.log.config import LogConfig
from kbroker.log.log_manager import LogManager
from kbroker.log.partition_log import PartitionLog
from kbroker.wire.records import BatchBuilder, iter_batches

from .helpers import make_batch

DAY = 86_400_000


def compact_cfg(**extra):
    props = {"cleanup.policy": "compact", "segment.bytes": "1500", "file.delete.delay.ms": "0",
             "delete.retention.ms": "1000", "min.cleanable.dirty.ratio": "0.0",
             "index.interval.bytes": "200"}
    props.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    return LogConfig.from_props(props)


def fill(log, rng, n_batches, keys=20, tomb_p=0.1, now=1000):
    """Append keyed records; returns {offset: (key, value)} of everything written."""
    written = {}
    for i in range(n_batches):
        n = rng.randint(1, 5)
        ks = [b"key-%d" % rng.randrange(keys) for _ in range(n)]
        vs = [None if rng.random() < tomb_p else b"v%d-%d" % (i, j) for j in range(n)]
        info = log.append(make_batch(n, keys=ks, values=vs, ts=now + i), now + i)
        for j in range(n):
            written[info.first_offset + j] = (ks[j], vs[j])
    log.high_watermark = log.log_end_offset
    return written


def records(log):
    out = []
    for b in log.batches(log.log_start_offset):
        assert b.verify_crc()
        for r in b.records():
            out.append((r.offset, r.key, r.value))
    return out


def latest_by_key(written, upto=None):
    latest = {}
    for off in sorted(written):
        if upto is not None and off >= upto:
            break
        latest[written[off][0]] = (off, written[off][1])
    return latest


def check_compacted(log, written, end):
    recs = records(log)
    offs = [o for o, _k, _v in recs]
    assert offs == sorted(set(offs))
    for off, k, v in recs:
        assert written[off] == (k, v)  # offsets preserved, content unchanged
    below = [(o, k, v) for o, k, v in recs if o < end]
    latest = latest_by_key(written, end)
    keys_below = [k for _o, k, _v in below]
    assert len(keys_below) == len(set(keys_below))  # one record per key in the cleaned part
    for o, k, v in below:
        assert latest[k] == (o, v)
    return recs


def test_compaction_keeps_latest_per_key_and_offsets(tmp_path):
    rng = random.Random(7)
    log = PartitionLog.open(str(tmp_path / "c-0"), compact_cfg(), 0)
    written = fill(log, rng, 300)
    log.roll(2000)
    nseg = log.num_segments
    assert nseg > 10
    stats = LogCleaner().clean(log, 2000)
    end = log.active_segment.base_offset
    assert log.first_dirty_offset == end
    assert stats.records_removed > 0 and stats.bytes_written < stats.bytes_read
    assert log.num_segments == nseg  # groups are sized from the segments before cleaning
    recs = check_compacted(log, written, end)
    # tombstones survive the first pass (their horizon is stamped now)
    latest = latest_by_key(written)
    tomb_keys = {k for k, (_o, v) in latest.items() if v is None}
    assert tomb_keys
    assert {k for _o, k, v in recs if v is None} == tomb_keys
    horizons = [b.delete_horizon_ms for b in log.batches() if b.delete_horizon_ms is not None]
    assert horizons and set(horizons) == {2000 + 1000}
    # the log still works: reads from any offset, appends, reopen
    for off in range(0, end, 37):
        data = log.read(off, 1).to_bytes()
        first = next(iter_batches(data))
        assert first.last_offset >= off
    info = log.append(make_batch(1, keys=[b"key-1"], values=[b"new"]), 3000)
    assert info.first_offset == end
    log.close()
    log = PartitionLog.open(str(tmp_path / "c-0"), compact_cfg(), 0, recovery_point=0)
    assert not log.recovery.damaged
    assert records(log)[:-1] == recs
    names = os.listdir(tmp_path / "c-0")
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_tombstones_removed_after_delete_retention(tmp_path):
    rng = random.Random(3)
    log = PartitionLog.open(str(tmp_path / "c-0"), compact_cfg(), 0)
    written = fill(log, rng, 200, keys=10, tomb_p=0.4)
    log.roll(2000)
    latest = latest_by_key(written)
    tomb_keys = {k for k, (_o, v) in latest.items() if v is None}
    assert tomb_keys and len(tomb_keys) < len(latest)
    cleaner = LogCleaner()
    assert cleaner.clean_logs([log], 2000).logs_cleaned == 1
    end = log.first_dirty_offset
    recs = check_compacted(log, written, end)
    assert {k for _o, k, v in recs if v is None} == tomb_keys  # stamped, not yet dropped
    assert log.tombstone_horizon_ms == 3000
    # nothing dirty and the horizon not reached: nothing to do
    assert cleaner.clean_logs([log], 2999).logs_cleaned == 0
    # past the horizon: a pass runs for the tombstones alone
    st = cleaner.clean_logs([log], 3000)
    assert st.logs_cleaned == 1 and st.tombstones_removed == len(tomb_keys)
    recs = records(log)
    assert not [r for r in recs if r[2] is None]
    present = {k for _o, k, _v in recs}
    assert present == set(latest) - tomb_keys
    for o, k, v in recs:
        assert latest[k] == (o, v)
    assert log.tombstone_horizon_ms is None
    assert cleaner.clean_logs([log], 10_000).logs_cleaned == 0
    # a tombstone older than a newer value of its key is dropped at once (superseded)
    log.append(make_batch(1, keys=[b"key-1"], values=[None]), 10_000)
    log.append(make_batch(1, keys=[b"key-1"], values=[b"back"]), 10_000)
    log.high_watermark = log.log_end_offset
    log.roll(10_000)
    cleaner.clean_logs([log], 10_000)
    recs = records(log)
    assert [v for _o, k, v in recs if k == b"key-1"] == [b"back"]


def test_repeated_keys_many_segments_via_manager(tmp_path):
    d = str(tmp_path / "d")
    lm = LogManager([d], compact_cfg(min_cleanable_dirty_ratio="0.5"))
    log = lm.get_or_create("compacted", 0)
    rng = random.Random(11)
    written = fill(log, rng, 400, keys=5, tomb_p=0.05)
    log.roll(5000)
    assert log.num_segments > 20
    st = lm.run_cleaner(5000)
    assert st.logs_cleaned == 1
    written.update(fill(log, rng, 400, keys=5, tomb_p=0.05, now=4000))
    log.roll(5000)
    nseg = log.num_segments
    lm.run_cleaner(5000)
    assert log.num_segments < nseg  # the small cleaned segments were merged
    end = log.first_dirty_offset
    check_compacted(log, written, end)
    cp = open(os.path.join(d, "cleaner-offset-checkpoint")).read()
    assert cp == f"0\n1\ncompacted 0 {end}\n"
    # nothing dirty: nothing to do; the ratio gate holds while dirty data is small
    assert lm.run_cleaner(5001).logs_cleaned == 0
    fill(log, rng, 3, keys=5, now=6000)
    log.roll(6000)
    assert lm.run_cleaner(6001).logs_cleaned == 0  # dirty ratio far below 0.5
    lm.shutdown()
    lm2 = LogManager([d], compact_cfg(min_cleanable_dirty_ratio="0.5"))
    assert lm2.get("compacted", 0).first_dirty_offset == end
    lm2.shutdown()


def test_max_compaction_lag_forces_cleaning(tmp_path):
    cfg = compact_cfg(min_cleanable_dirty_ratio="0.99", max_compaction_lag_ms="10000")
    log = PartitionLog.open(str(tmp_path / "c-0"), cfg, 0)
    rng = random.Random(5)
    fill(log, rng, 100, keys=3, now=1000)
    log.roll(1200)
    cleaner = LogCleaner()
    first = cleaner.cleanable(log, 1200)
    first.log.first_dirty_offset = None
    # first pass: everything dirty (ratio 1.0) -> cleaned
    assert cleaner.clean_logs([log], 1200).logs_cleaned == 1
    fill(log, rng, 5, keys=3, now=2000)
    log.roll(2100)
    assert cleaner.clean_logs([log], 2100).logs_cleaned == 0  # ratio small, lag not reached
    assert cleaner.clean_logs([log], 2000 + 10_100).logs_cleaned == 1  # max lag exceeded


def test_min_compaction_lag_and_high_watermark_bound(tmp_path):
    cfg = compact_cfg(min_compaction_lag_ms="5000")
    log = PartitionLog.open(str(tmp_path / "c-0"), cfg, 0)
    rng = random.Random(9)
    fill(log, rng, 60, keys=3, now=1000)
    log.roll(1100)
    c = LogCleaner().cleanable(log, 3000)
    assert c.dirty_bytes == 0  # every segment is younger than the lag
    c = LogCleaner().cleanable(log, 10_000)
    assert c.dirty_bytes > 0
    log.high_watermark = 10
    c = LogCleaner().cleanable(log, 10_000)
    assert c.first_uncleanable == 10


def test_control_batches_and_producer_last_batch_kept(tmp_path):
    log = PartitionLog.open(str(tmp_path / "c-0"), compact_cfg(), 0)
    # producer 42 writes key A twice; the later plain write of A supersedes both
    log.append(make_batch(1, keys=[b"A"], values=[b"p1"], producer_id=42, producer_epoch=0,
                          base_sequence=0), 1000)
    log.append(make_batch(1, keys=[b"A"], values=[b"p2"], producer_id=42, producer_epoch=0,
                          base_sequence=1), 1000)
    ctrl = BatchBuilder(producer_id=43, producer_epoch=0, is_transactional=True, is_control=True)
    ctrl.append(key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x00", timestamp=1000)
    log.append(bytearray(ctrl.build()), 1000, origin="coordinator")
    for i in range(30):
        log.append(make_batch(1, keys=[b"A"], values=[b"x%d" % i]), 1000)
    log.high_watermark = log.log_end_offset
    log.roll(1000)
    LogCleaner().clean(log, 1000)
    batches = list(log.batches())
    by_pid = [b for b in batches if b.producer_id == 42]
    assert [b.base_offset for b in by_pid] == [1]  # only the producer's last batch ...
    assert by_pid[0].records_count == 0 and by_pid[0].base_sequence == 1  # ... kept empty
    assert by_pid[0].last_offset_delta == 0
    assert [b.base_offset for b in batches if b.is_control] == [2]
    vals = [r.value for b in batches for r in b.records() if not b.is_control]
    assert vals == [b"x29"]


def test_interrupted_swap_is_completed_on_open(tmp_path, monkeypatch):
    rng = random.Random(1)
    path = str(tmp_path / "c-0")
    log = PartitionLog.open(path, compact_cfg(), 0)
    written = fill(log, rng, 150)
    log.roll(2000)
    end = log.active_segment.base_offset

    class Crash(Exception):
        pass

    def crash(*a, **k):
        raise Crash()

    monkeypatch.setattr(PartitionLog, "_replace_segments", crash)
    with pytest.raises(Crash):
        LogCleaner().clean(log, 2000)
    assert [n for n in os.listdir(path) if n.endswith(".swap")]
    log.close_without_trim()
    monkeypatch.undo()
    log = PartitionLog.open(path, compact_cfg(), 0)
    assert not [n for n in os.listdir(path) if n.endswith((".swap", ".cleaned"))]
    recs = records(log)
    offs = [o for o, _k, _v in recs]
    assert offs == sorted(set(offs))  # no duplicates from the half-done swap
    for o, k, v in recs:
        assert written[o] == (k, v)
    latest = latest_by_key(written, end)
    kept = {(o, k) for o, k, _v in recs}
    for k, (o, _v) in latest.items():
        assert (o, k) in kept  # the latest record of every key is still there
    assert log.log_end_offset == max(written) + 1
