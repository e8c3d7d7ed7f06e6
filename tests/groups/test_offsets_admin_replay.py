"""Offsets, admin operations, and rebuilding a shard by replaying its encoded records."""
import struct
import uuid

from kbroker.groups import errors as E
from kbroker.groups import record_codec
from kbroker.groups.classic.group import GroupState
from kbroker.groups.config import GroupConfig
from kbroker.groups.consumer.messages import HeartbeatRequest
from kbroker.groups.offsets import CommitPartition
from kbroker.groups.partitioning import java_string_hashcode, offsets_partition_for
from kbroker.groups.records import OffsetCommitRecord
from kbroker.groups.shard import GroupShard, OffsetCommitRequest

from tests.groups.harness import Harness
from tests.groups.test_classic_protocol import stable_group

T1 = uuid.UUID(int=7)


def commit(h, group, offsets, generation=-1, member="", version=8, instance=None, retention=-1):
    topics = {}
    for (t, p), off in offsets.items():
        meta = None
        if isinstance(off, tuple):
            off, meta = off
        topics.setdefault(t, []).append(CommitPartition(p, off, 3, meta if meta is not None else f"m{off}"))
    req = OffsetCommitRequest(group, list(topics.items()), generation, member, instance, retention, version)
    res = h.run(h.shard.commit_offsets(req, h.now))
    return {(t, p): code for t, parts in res.response for p, code in parts}


def fetched(h, group, topics=None, **kw):
    err, out = h.shard.fetch_offsets(group, topics, **kw)
    assert err == E.NONE
    return {(t, r.partition): (r.offset, r.metadata, r.error) for t, rows in out for r in rows}


def test_partition_for_group_matches_java():
    assert java_string_hashcode("test") == 3556498
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert offsets_partition_for("polygenelubricants", 50) == 0
    assert offsets_partition_for("test", 50) == 48


def test_simple_group_commit_and_fetch_with_metadata():
    h = Harness()
    assert commit(h, "s", {("t", 0): (5, "hello"), ("t", 1): 9}) == {("t", 0): E.NONE, ("t", 1): E.NONE}
    assert fetched(h, "s", [("t", [0, 1, 2])]) == {("t", 0): (5, "hello", 0), ("t", 1): (9, "m9", 0),
                                                    ("t", 2): (-1, "", 0)}
    assert fetched(h, "s") == {("t", 0): (5, "hello", 0), ("t", 1): (9, "m9", 0)}
    assert fetched(h, "unknown", [("t", [0])]) == {("t", 0): (-1, "", 0)}
    assert commit(h, "s", {("t", 0): (6, "x" * 5000)}) == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}
    assert [g.group_id for g in h.shard.list_groups()] == ["s"]


def test_member_commits_checked_against_generation():
    h = Harness()
    (a, b), gen, _ = stable_group(h)
    assert commit(h, "g", {("t", 0): 1}, gen, a) == {("t", 0): E.NONE}
    assert commit(h, "g", {("t", 0): 1}, gen + 1, a) == {("t", 0): E.ILLEGAL_GENERATION}
    assert commit(h, "g", {("t", 0): 1}, gen, "who") == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert commit(h, "g", {("t", 0): 1}) == {("t", 0): E.UNKNOWN_MEMBER_ID}   # not empty: no admin commits
    assert commit(h, "nope", {("t", 0): 1}, 3, "x") == {("t", 0): E.ILLEGAL_GENERATION}
    assert commit(h, "nope", {("t", 0): 1}, 3, "x", version=9) == {("t", 0): E.GROUP_ID_NOT_FOUND}
    # a commit during PreparingRebalance is allowed (eager consumers commit while revoking)
    h.join_new()
    assert h.shard.classic_group("g").state == GroupState.PREPARING_REBALANCE
    assert commit(h, "g", {("t", 0): 2}, gen, a) == {("t", 0): E.NONE}


def test_consumer_group_commit_checks_member_epoch():
    h = Harness(topics={"t": (T1, 1)})
    r = h.run(h.shard.consumer_group_heartbeat(HeartbeatRequest("cg", "m1", 0, rebalance_timeout_ms=1000,
                                                                subscribed_topic_names=["t"], topic_partitions={}), h.now)).response
    assert commit(h, "cg", {("t", 0): 1}, r.member_epoch, "m1", version=9) == {("t", 0): E.NONE}
    assert commit(h, "cg", {("t", 0): 1}, r.member_epoch + 1, "m1", version=9) == {("t", 0): E.STALE_MEMBER_EPOCH}
    assert commit(h, "cg", {("t", 0): 1}, r.member_epoch, "zz", version=9) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert h.shard.fetch_offsets("cg", None, member_id="m1", member_epoch=99)[0] == E.STALE_MEMBER_EPOCH


def test_delete_groups_refuses_non_empty_then_deletes():
    h = Harness()
    (a, b), gen, _ = stable_group(h)
    commit(h, "g", {("t", 0): 4}, gen, a)
    assert h.run(h.shard.delete_group("g", h.now)).response == E.NON_EMPTY_GROUP
    h.leave("g", a, b)
    assert h.run(h.shard.delete_group("g", h.now)).response == E.NONE
    assert h.shard.groups == {} and fetched(h, "g", [("t", [0])])[("t", 0)][0] == -1
    assert h.run(h.shard.delete_group("g", h.now)).response == E.GROUP_ID_NOT_FOUND


def test_offset_delete_respects_subscription():
    from kbroker.groups.consumer_protocol_bytes import encode_subscription
    h = Harness()
    (a,), gen, _ = stable_group(h, 1, protocols=(("range", encode_subscription(["t"])),))
    commit(h, "g", {("t", 0): 4, ("u", 0): 5}, gen, a)
    err, topics = h.run(h.shard.delete_offsets("g", [("t", [0]), ("u", [0])])).response
    assert err == E.NONE and topics == [("t", [(0, E.GROUP_SUBSCRIBED_TO_TOPIC)]), ("u", [(0, E.NONE)])]
    assert fetched(h, "g") == {("t", 0): (4, "m4", 0)}
    assert h.run(h.shard.delete_offsets("zz", [("t", [0])])).response[0] == E.GROUP_ID_NOT_FOUND


def test_offsets_expire_after_group_is_empty_for_retention():
    h = Harness(offsets_retention_ms=10_000)
    (a,), gen, _ = stable_group(h, 1)
    commit(h, "g", {("t", 0): 4}, gen, a)
    h.advance(20_000, step=1000)            # still a member that heartbeats? no: session expires
    assert h.shard.classic_group("g") is None or h.shard.classic_group("g").state == GroupState.EMPTY
    res = h.run(h.shard.expire_offsets(h.now))
    g = h.shard.classic_group("g")
    # emptied ~19 s ago at most: retention counts from then, so offsets may still be there
    h.now += 10_001
    h.run(h.shard.expire_offsets(h.now))
    assert fetched(h, "g", [("t", [0])])[("t", 0)][0] == -1
    assert "g" not in h.shard.groups


def test_simple_group_offsets_expire_from_commit_time_and_explicit_retention():
    h = Harness(offsets_retention_ms=10_000)
    commit(h, "s", {("t", 0): 1})
    commit(h, "s", {("t", 1): 1}, retention=100_000)
    h.now += 10_001
    h.run(h.shard.expire_offsets(h.now))
    assert set(fetched(h, "s")) == {("t", 1)}


def test_require_stable_reports_pending_transactional_offsets():
    h = Harness()
    commit(h, "s", {("t", 0): 1})
    h.shard.replay(OffsetCommitRecord("s", "t", 0, h.shard.offsets.offsets["s"][("t", 0)]), producer_id=42)
    assert fetched(h, "s", [("t", [0])], require_stable=True)[("t", 0)][2] == E.UNSTABLE_OFFSET_COMMIT
    h.shard.offsets.complete_transaction(42, committed=True)
    assert fetched(h, "s", [("t", [0])], require_stable=True)[("t", 0)][2] == E.NONE


def _rebuild(records, topics=None):
    shard = GroupShard(0, GroupConfig(), topics=lambda: topics or {})
    for r in records:
        key, value = record_codec.encode(r)
        shard.replay(record_codec.decode(key, value))
    shard.on_loaded(0)
    return shard


def test_replay_rebuilds_classic_groups_and_offsets():
    h = Harness()
    (a, b), gen, leader = stable_group(h)
    commit(h, "g", {("t", 0): 10, ("t", 1): (11, "meta")}, gen, a)
    commit(h, "s", {("x", 0): 3})
    stable_group(h, 1, group="gone")
    h.leave("gone", next(iter(h.shard.classic_group("gone").members)))
    h.run(h.shard.delete_group("gone", h.now))
    shard = _rebuild(h.records)
    g = shard.classic_group("g")
    assert g.state == GroupState.STABLE and g.generation == gen and g.leader_id == leader
    assert set(g.members) == {a, b} and g.members[a].assignment == a.encode()
    assert g.protocol_name == "range" and g.protocol_type == "consumer"
    assert shard.offsets.offsets["g"][("t", 1)].metadata == "meta"
    assert shard.offsets.offsets["s"][("x", 0)].offset == 3
    assert "gone" not in shard.groups
    assert {l.group_id for l in shard.list_groups()} == {"g", "s"}


def test_replay_rebuilds_consumer_groups():
    topics = {"t": (T1, 4)}
    h = Harness(topics=topics)
    for m in ("a", "b"):
        h.run(h.shard.consumer_group_heartbeat(HeartbeatRequest("cg", m, 0, rebalance_timeout_ms=1000,
                                                                subscribed_topic_names=["t"], topic_partitions={}), h.now))
    ra = h.run(h.shard.consumer_group_heartbeat(HeartbeatRequest("cg", "a", 1), h.now)).response
    h.run(h.shard.consumer_group_heartbeat(HeartbeatRequest("cg", "a", 1, topic_partitions=ra.assignment), h.now))
    h.run(h.shard.consumer_group_heartbeat(HeartbeatRequest("cg", "b", 2), h.now))
    before = h.shard.consumer_group("cg")
    shard = _rebuild(h.records, topics)
    after = shard.consumer_group("cg")
    assert after.group_epoch == before.group_epoch and after.assignment_epoch == before.assignment_epoch
    assert after.target == before.target and after.owners == before.owners
    for mid, m in before.members.items():
        n = after.members[mid]
        assert (n.member_epoch, n.state, n.assigned, n.subscribed_topic_names) == \
               (m.member_epoch, m.state, m.assigned, m.subscribed_topic_names)
    assert after.state == before.state


def test_record_encoding_is_kafkas_layout():
    key, value = record_codec.encode(OffsetCommitRecord("g", "t", 3, None))
    assert value is None
    assert key == struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 3)
