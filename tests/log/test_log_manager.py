import os

import pytest

from kbroker.log.checkpoint import (
    LeaderEpochCache,
    OffsetCheckpointFile,
    PartitionMetadataFile,
)
from kbroker.log.config import LogConfig
from kbroker.log.errors import InvalidConfigError, KafkaStorageError
from kbroker.log.log_manager import LogManager
from kbroker.wire.records import iter_batches

from .helpers import make_batch


def test_log_config_names_and_defaults():
    c = LogConfig()
    assert c.segment_bytes == 1073741824 and c.segment_ms == 7 * 24 * 3600 * 1000
    assert c.segment_index_bytes == 10485760 and c.index_interval_bytes == 4096
    assert c.retention_ms == 604800000 and c.retention_bytes == -1
    assert c.cleanup_policy == ("delete",) and c.delete_retention_ms == 86400000
    assert c.min_cleanable_dirty_ratio == 0.5 and c.max_compaction_lag_ms == 2**63 - 1
    assert c.max_message_bytes == 1048588 and c.message_timestamp_type == "CreateTime"
    assert c.flush_messages == 2**63 - 1 and c.flush_ms == 2**63 - 1
    assert c.file_delete_delay_ms == 60000 and c.preallocate is False
    c2 = LogConfig.from_props({"cleanup.policy": "compact,delete", "retention.ms": "-1",
                               "preallocate": "true", "some.unknown": "x"})
    assert c2.compact and c2.delete and c2.retention_ms == -1 and c2.preallocate
    assert c2.extra == {"some.unknown": "x"}
    assert c2.to_props()["cleanup.policy"] == "compact,delete"
    with pytest.raises(InvalidConfigError):
        LogConfig.from_props({"segment.bytes": "abc"})
    with pytest.raises(InvalidConfigError):
        LogConfig.from_props({"cleanup.policy": "nope"})
    b = LogConfig.broker_defaults({"log.retention.hours": "2", "log.retention.minutes": "3",
                                   "log.segment.bytes": "12345", "message.max.bytes": "999"})
    assert b.retention_ms == 180000 and b.segment_bytes == 12345 and b.max_message_bytes == 999
    assert b.with_overrides({"retention.ms": "5"}).retention_ms == 5


def test_checkpoint_formats(tmp_path):
    f = OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint"))
    f.write({("a", 0): 5, ("b-c", 3): 7})
    assert open(f.path).read() == "0\n2\na 0 5\nb-c 3 7\n"
    assert f.read() == {("a", 0): 5, ("b-c", 3): 7}
    m = PartitionMetadataFile(str(tmp_path / "partition.metadata"))
    m.write("AAAAAAAAAAAAAAAAAAAAAQ")
    assert open(m.path).read() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"
    assert m.read() == "AAAAAAAAAAAAAAAAAAAAAQ"
    c = LeaderEpochCache(str(tmp_path / "leader-epoch-checkpoint"))
    c.assign(0, 0)
    c.assign(2, 10)
    c.assign(2, 12)  # same epoch: no-op
    c.assign(5, 20)
    assert c.end_offset_for(1, 30) == (0, 10)
    assert c.end_offset_for(5, 30) == (5, 30)
    assert c.end_offset_for(9, 30) == (-1, -1)
    c.truncate_from_start(15)
    assert c.entries == [(2, 15), (5, 20)]
    assert LeaderEpochCache.load(c._file.path).entries == [(2, 15), (5, 20)]


def test_manager_create_reopen_clean(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    lm = LogManager(dirs, LogConfig.from_props({"segment.bytes": "1000"}))
    a0 = lm.get_or_create("a", 0, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")
    a1 = lm.get_or_create("a", 1)
    assert lm.get_or_create("a", 0) is a0
    assert {lm.dir_of("a", 0), lm.dir_of("a", 1)} == set(dirs)  # spread over dirs
    for _ in range(10):
        a0.append(make_batch(3), 0)
        a1.append(make_batch(2), 0)
    a0.high_watermark = a0.log_end_offset
    a0.delete_records(6)
    lm.shutdown()
    for d in dirs:
        assert os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
        assert os.path.exists(os.path.join(d, "recovery-point-offset-checkpoint"))
    rp = OffsetCheckpointFile(os.path.join(lm.dir_of("a", 0) or dirs[0],
                                           "recovery-point-offset-checkpoint"))
    lm2 = LogManager(dirs, LogConfig.from_props({"segment.bytes": "1000"}))
    assert len(lm2) == 2 and not lm2.load_report.recovered
    assert sorted(lm2.load_report.clean_dirs) == sorted(dirs)
    b0 = lm2.get("a", 0)
    assert (b0.log_start_offset, b0.log_end_offset) == (6, 30)
    assert b0.topic_id == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert lm2.get("a", 1).log_end_offset == 20
    for d in dirs:
        assert not os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
    assert rp is not None
    lm2.shutdown()


def test_manager_unclean_reopen_recovers(tmp_path):
    d = str(tmp_path / "d")
    lm = LogManager([d], LogConfig.from_props({"segment.bytes": "1000"}))
    lg = lm.get_or_create("t", 0)
    for _ in range(30):
        lg.append(make_batch(3), 0)
    lm.checkpoint()
    path = lg.active_segment.path
    lm.abandon()
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 5)
    lm2 = LogManager([d], LogConfig.from_props({"segment.bytes": "1000"}))
    rep = lm2.load_report.recovered[("t", 0)]
    assert rep.dropped_bytes > 0
    assert lm2.load_report.damaged
    assert lm2.get("t", 0).log_end_offset == 87
    lm2.shutdown()


def test_manager_lock(tmp_path):
    d = str(tmp_path / "d")
    lm = LogManager([d])
    with pytest.raises(KafkaStorageError):
        LogManager([d])
    lm.shutdown()
    LogManager([d]).shutdown()


def test_manager_delete_partition(tmp_path):
    d = str(tmp_path / "d")
    lm = LogManager([d], LogConfig.from_props({"file.delete.delay.ms": "1000"}))
    lg = lm.get_or_create("my.topic-x", 2)
    lg.append(make_batch(1), 0)
    region = lg.read(0, 100).regions[0]
    assert lm.delete("my.topic-x", 2, now_ms=5000)
    assert lm.get("my.topic-x", 2) is None
    names = os.listdir(d)
    deleted = [n for n in names if n.endswith("-delete")]
    assert len(deleted) == 1 and deleted[0].startswith("my.topic-x-2.")
    assert len(deleted[0]) == len("my.topic-x-2.") + 32 + len("-delete")
    assert lm.run_retention(5999).dirs_removed == 0
    assert lm.run_retention(6000).dirs_removed == 1
    assert not [n for n in os.listdir(d) if n.endswith("-delete")]
    assert not lm.delete("my.topic-x", 2)
    del region
    # recreating gives a fresh log
    assert lm.get_or_create("my.topic-x", 2).log_end_offset == 0
    lm.shutdown()


def test_manager_retention_and_flush(tmp_path):
    d = str(tmp_path / "d")
    cfg = LogConfig.from_props({"segment.bytes": "600", "retention.bytes": "1000",
                                "file.delete.delay.ms": "0", "retention.ms": "-1"})
    lm = LogManager([d], cfg)
    lg = lm.get_or_create("t", 0)
    for _ in range(40):
        lg.append(make_batch(3), 0)
    lg.high_watermark = lg.log_end_offset
    n0 = lg.num_segments
    st = lm.run_retention(0)
    assert st.segments_deleted > 0 and lg.num_segments < n0
    assert lm.run_flush(0) == 1
    assert lg.recovery_point == lg.active_segment.base_offset
    rp = OffsetCheckpointFile(os.path.join(d, "recovery-point-offset-checkpoint")).read()
    assert rp[("t", 0)] == lg.recovery_point
    lm.checkpoint()
    lso = OffsetCheckpointFile(os.path.join(d, "log-start-offset-checkpoint")).read()
    assert lso[("t", 0)] == lg.log_start_offset > 0
    data = lg.read(lg.log_start_offset, 1 << 20).to_bytes()
    assert [b.base_offset for b in iter_batches(data)][0] == lg.log_start_offset
    lm.shutdown()
