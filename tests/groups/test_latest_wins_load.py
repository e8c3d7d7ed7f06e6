"""A coordinator load replays plain offset commits latest-wins (kbroker.groups.latest_commits):
over seeded random logs mixing commits, tombstones, both key versions of the same offset,
group metadata, consumer-group records, transactional commits, markers and an undecodable
record, the loaded shard must equal the one a record-by-record replay builds.

    python -m pytest tests/groups/test_latest_wins_load.py  (a failing seed is in the message)
"""
import random

from kbroker.groups import latest_commits, record_codec
from kbroker.groups import records as R
from kbroker.groups.config import GroupConfig
from kbroker.groups.runtime import GroupCoordinatorRuntime
from kbroker.groups.shard import GroupShard
from kbroker.slices import run_to_end
from kbroker.wire.records import BatchBuilder, ControlRecordType, control_batch
from tests.groups.fake_offsets_broker import FakeLog, fake_broker

GROUPS = ("a", "b", "c")
NOW = 5_000


def offset_record(rng, group):
    value = None if rng.random() < 0.25 else R.OffsetValue(rng.randrange(100), rng.choice((-1, 3)), "", 7, -1)
    return R.OffsetCommitRecord(group, rng.choice("tu"), rng.randrange(3), value)


def other_record(rng, group):
    kind = rng.randrange(3)
    if kind == 0:
        value = None if rng.random() < 0.4 else R.GroupMetadataValue(
            rng.choice(("", "consumer")), rng.randrange(2), None, None, 100, [])
        return R.GroupMetadataRecord(group, value)
    if kind == 1:
        return R.ConsumerGroupMetadataRecord(group, None if rng.random() < 0.4 else rng.randrange(1, 5))
    return "junk"


def encoded(rng, rec):
    if rec == "junk":                                      # a group metadata key that cannot decode
        return b"\x00\x02\xff", b"\x00\x03"
    key, value = record_codec.encode(rec)
    if isinstance(rec, R.OffsetCommitRecord) and rng.random() < 0.3:
        key = b"\x00\x00" + key[2:]                        # the same offset under key version 0
    return key, value


def random_log(seed):
    rng = random.Random(seed)
    log = FakeLog()
    open_txns = set()
    for _ in range(rng.randrange(5, 25)):
        roll = rng.random()
        if roll < 0.15 and open_txns:
            pid = rng.choice(sorted(open_txns))
            open_txns.discard(pid)
            marker = rng.choice((ControlRecordType.COMMIT, ControlRecordType.ABORT))
            log.buffers.append(control_batch(marker, pid, 0))
            continue
        pid = rng.choice((5, 6)) if roll < 0.3 else -1
        b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                         is_transactional=pid >= 0)
        for _ in range(rng.randrange(1, 12)):
            group = rng.choice(GROUPS)
            rec = offset_record(rng, group) if pid >= 0 or rng.random() < 0.8 else other_record(rng, group)
            b.append(*encoded(rng, rec))
        if pid >= 0:
            open_txns.add(pid)
        log.buffers.append(b.build())
    return log


def replay_one_by_one(log):
    shard = GroupShard(0, GroupConfig(num_partitions=1))
    for batch in log.batches():
        if batch.is_control:
            shard.offsets.complete_transaction(batch.producer_id, committed=int(batch.control_type()) == 1)
            continue
        pid = batch.producer_id if batch.is_transactional else -1
        for r in batch.records():
            try:
                rec = record_codec.decode_generated(r.key, r.value)
            except Exception:   # noqa: BLE001 - skipped, as the load skips it
                continue
            if rec is not None:
                shard.replay(rec, producer_id=pid)
    shard.on_loaded(NOW)
    return shard


def state(shard):
    return shard.offsets.offsets, shard.offsets.pending_txn, shard.groups


def test_latest_wins_load_builds_the_shard_a_record_by_record_replay_builds(monkeypatch):
    rt = GroupCoordinatorRuntime(fake_broker(1), GroupConfig(num_partitions=1), lambda: NOW)
    held_back = 0
    for seed in range(300):
        log = random_log(seed)
        monkeypatch.setattr(latest_commits, "MAX_HELD", (3, 100_000)[seed % 2])   # early replays too
        loaded = run_to_end(rt._load_steps(0, log))
        assert state(loaded) == state(replay_one_by_one(log)), \
            f"seed {seed}: python -m pytest {__file__} (random_log({seed}))"
        held_back += sum(1 for b in log.batches() if not b.is_transactional for r in b.records()
                         if record_codec.is_offset_commit_key(r.key))
    assert held_back > 1000                                 # the latest-wins path did run
