"""KIP-848 consumer groups: epochs, server-side assignment, revoke-before-assign."""
import uuid

from kbroker.groups import errors as E
from kbroker.groups.consumer.group import ConsumerGroupState, MemberState
from kbroker.groups.consumer.messages import HeartbeatRequest

from tests.groups.harness import Harness

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def hb(h, member, epoch, topics=None, owned=None, regex=None, group="g", instance=None, assignor=None):
    req = HeartbeatRequest(group, member, epoch, instance_id=instance, rebalance_timeout_ms=3000,
                           subscribed_topic_names=topics, subscribed_topic_regex=regex,
                           server_assignor=assignor, topic_partitions=owned)
    return h.run(h.shard.consumer_group_heartbeat(req, h.now)).response


def join(h, member, topics=("t1",), **kw):
    r = hb(h, member, 0, list(topics) if topics is not None else None, {}, **kw)
    assert r.error == E.NONE, r
    return r


def count(assignment):
    return sum(len(p) for p in (assignment or {}).values())


def test_single_member_gets_everything():
    h = Harness(topics={"t1": (T1, 6)})
    r = join(h, "a")
    assert r.member_epoch == 1 and r.assignment == {T1: [0, 1, 2, 3, 4, 5]}
    assert h.shard.consumer_group("g").state == ConsumerGroupState.STABLE
    r = hb(h, "a", 1)
    assert r.error == E.NONE and r.assignment is None      # nothing changed, nothing sent


def test_second_member_waits_for_revocation():
    h = Harness(topics={"t1": (T1, 6)})
    join(h, "a")
    rb = join(h, "b")
    assert rb.member_epoch == 2 and rb.assignment == {}      # a still owns everything
    g = h.shard.consumer_group("g")
    assert g.members["b"].state == MemberState.UNRELEASED_PARTITIONS
    ra = hb(h, "a", 1)
    assert ra.member_epoch == 1 and count(ra.assignment) == 3  # revoke 3, keep epoch
    assert g.members["a"].state == MemberState.UNREVOKED_PARTITIONS
    kept = ra.assignment
    # b asks again: still nothing, a has not confirmed
    assert hb(h, "b", 2).assignment is None
    ra = hb(h, "a", 1, owned=kept)                          # a confirms the revocation
    assert ra.member_epoch == 2 and ra.assignment == kept
    rb = hb(h, "b", 2)
    assert count(rb.assignment) == 3 and not set(rb.assignment[T1]) & set(kept[T1])
    assert g.state == ConsumerGroupState.STABLE


def test_leave_and_session_expiry_hand_partitions_over():
    h = Harness(topics={"t1": (T1, 4)}, consumer_session_timeout_ms=1000)
    join(h, "a"); join(h, "b")
    ra = hb(h, "a", 1); hb(h, "a", 1, owned=ra.assignment); hb(h, "b", 2)
    assert hb(h, "b", -1).member_epoch == -1                 # b leaves
    ra = hb(h, "a", 2)
    assert ra.member_epoch == 3 and count(ra.assignment) == 4
    join(h, "c")
    for _ in range(4):                                       # c heartbeats, a goes silent
        h.advance(400)
        hb(h, "c", h.shard.consumer_group("g").members["c"].member_epoch)
    g = h.shard.consumer_group("g")
    assert "a" not in g.members
    rc = hb(h, "c", g.members["c"].member_epoch)
    assert count(g.members["c"].assigned) == 4


def test_fenced_and_unknown_member():
    h = Harness(topics={"t1": (T1, 2)})
    join(h, "a")
    assert hb(h, "a", 7).error == E.FENCED_MEMBER_EPOCH
    assert hb(h, "zz", 1).error == E.UNKNOWN_MEMBER_ID
    assert hb(h, "a", 0, ["t1"], {}).error == E.NONE         # rejoin after a fence keeps the id


def test_lost_response_previous_epoch_is_accepted():
    h = Harness(topics={"t1": (T1, 2)})
    join(h, "a")
    join(h, "b")
    ra = hb(h, "a", 1)
    hb(h, "a", 1, owned=ra.assignment)         # epoch 2 now; pretend the answer was lost
    assert hb(h, "a", 1, owned=ra.assignment).error == E.NONE


def test_range_and_uniform_assignors():
    h = Harness(topics={"t1": (T1, 3), "t2": (T2, 3)})
    join(h, "a", ("t1", "t2"), assignor="range")
    join(h, "b", ("t1", "t2"), assignor="range")
    g = h.shard.consumer_group("g")
    assert g.target["a"] == {T1: {0, 1}, T2: {0, 1}} and g.target["b"] == {T1: {2}, T2: {2}}
    h2 = Harness(topics={"t1": (T1, 3), "t2": (T2, 3)})
    join(h2, "a", ("t1", "t2"))
    join(h2, "b", ("t1", "t2"))
    g2 = h2.shard.consumer_group("g")
    assert sorted(count(a) for a in g2.target.values()) == [3, 3]
    assert hb(h2, "c", 0, ["t1"], {}, assignor="nope").error == E.UNSUPPORTED_ASSIGNOR


def test_uniform_is_sticky_and_balanced_with_mixed_subscriptions():
    h = Harness(topics={"t1": (T1, 4), "t2": (T2, 2)})
    join(h, "a", ("t1", "t2")); join(h, "b", ("t1",)); join(h, "c", ("t1", "t2"))
    g = h.shard.consumer_group("g")
    before = {m: {t: set(p) for t, p in a.items()} for m, a in g.target.items()}
    assert sorted(count(a) for a in before.values()) == [2, 2, 2]
    assert T2 not in before["b"]
    hb(h, "b", g.members["b"].member_epoch, topics=["t1"])   # no change: no new epoch
    assert g.target == before


def test_regex_subscription_picks_up_new_topics():
    h = Harness(topics={"orders-1": (T1, 2), "other": (T2, 2)})
    r = join(h, "a", topics=None, regex="orders-.*")
    assert r.assignment == {T1: [0, 1]}
    T3 = uuid.UUID(int=3)
    h.topics["orders-2"] = (T3, 1)
    r = hb(h, "a", 1)
    assert r.member_epoch == 2 and r.assignment == {T1: [0, 1], T3: [0]}
    assert hb(h, "b", 0, None, {}, regex="(").error == E.INVALID_REGULAR_EXPRESSION


def test_revocation_timeout_fences_member():
    h = Harness(topics={"t1": (T1, 2)}, consumer_session_timeout_ms=100_000)
    join(h, "a")
    join(h, "b")
    hb(h, "a", 1)                         # told to revoke; never confirms
    for _ in range(7):
        h.advance(500)
        hb(h, "b", h.shard.consumer_group("g").members["b"].member_epoch)
    g = h.shard.consumer_group("g")
    assert "a" not in g.members
    assert count(g.members["b"].assigned) == 2


def test_static_member_restart_keeps_assignment():
    h = Harness(topics={"t1": (T1, 4)})
    join(h, "a", instance="i-a"); join(h, "b", instance="i-b")
    ra = hb(h, "a", 1, instance="i-a"); hb(h, "a", 1, owned=ra.assignment, instance="i-a"); hb(h, "b", 2, instance="i-b")
    g = h.shard.consumer_group("g")
    epoch = g.group_epoch
    b_parts = {t: set(p) for t, p in g.members["b"].assigned.items()}
    assert hb(h, "b", -2, instance="i-b").member_epoch == -2
    assert hb(h, "b2", 0, ["t1"], {}, instance="i-a").error == E.UNRELEASED_INSTANCE_ID
    r = join(h, "b2", instance="i-b")
    assert {t: set(p) for t, p in r.assignment.items()} == b_parts and g.group_epoch == epoch
    assert "b" not in g.members


def test_group_described_states():
    h = Harness(topics={"t1": (T1, 2)})
    join(h, "a")
    assert h.shard.consumer_group("g").state == ConsumerGroupState.STABLE
    join(h, "b")
    assert h.shard.consumer_group("g").state == ConsumerGroupState.RECONCILING
    hb(h, "a", -1); hb(h, "b", -1)
    assert h.shard.consumer_group("g").state == ConsumerGroupState.EMPTY


def commit(h, member, epoch, partitions, topic="t1", group="g"):
    from kbroker.groups.offsets import CommitPartition
    from kbroker.groups.shard import OffsetCommitRequest
    req = OffsetCommitRequest(group, [(topic, [CommitPartition(p, 10 + p) for p in partitions])], epoch, member)
    return dict(h.run(h.shard.commit_offsets(req, h.now)).response[0][1])


def test_offset_commit_with_an_older_epoch_kip_1251():
    """An epoch older than the member's is accepted for partitions it got at or before that
    epoch (KIP-1251); anything newer than its epoch, or partitions it does not own, is stale."""
    h = Harness(topics={"t1": (T1, 6)})
    join(h, "a")                                          # a: epoch 1, all six
    join(h, "b")                                          # group epoch 2
    ra = hb(h, "a", 1)
    kept = set(ra.assignment[T1])
    ra = hb(h, "a", 1, owned=ra.assignment)               # revocation done: a at epoch 2
    assert ra.member_epoch == 2
    revoked = set(range(6)) - kept
    got = commit(h, "a", 1, range(6))                     # a's commit raced the epoch bump
    assert {p for p, c in got.items() if c == E.NONE} == kept
    assert {p for p, c in got.items() if c == E.STALE_MEMBER_EPOCH} == revoked
    assert h.shard.offsets.fetch("g", [("t1", sorted(kept))])[0][1][0].offset == 10 + min(kept)
    assert set(commit(h, "a", 2, kept).values()) == {E.NONE}
    assert set(commit(h, "a", 3, kept).values()) == {E.STALE_MEMBER_EPOCH}   # from the future
    rb = hb(h, "b", 2)
    assert set(rb.assignment[T1]) == revoked
    assert set(commit(h, "b", 2, revoked).values()) == {E.NONE}
    assert set(commit(h, "b", 1, revoked).values()) == {E.STALE_MEMBER_EPOCH}  # assigned at 2
    assert set(commit(h, "zz", 2, revoked).values()) == {E.UNKNOWN_MEMBER_ID}


def test_assignment_epochs_rebuilt_on_replay():
    from kbroker.groups.shard import GroupShard
    h = Harness(topics={"t1": (T1, 6)})
    join(h, "a"); join(h, "b")
    ra = hb(h, "a", 1); hb(h, "a", 1, owned=ra.assignment); hb(h, "b", 2)
    live = {m: dict(h.shard.consumer_group("g").members[m].assignment_epochs) for m in "ab"}
    fresh = GroupShard(0, h.shard.config, topics=lambda: h.topics)
    for r in h.records:
        fresh.replay(r)
    assert {m: fresh.consumer_group("g").members[m].assignment_epochs for m in "ab"} == live
    assert set(live["a"].values()) == {1} and set(live["b"].values()) == {2}


def test_switching_protocols_only_when_the_group_is_empty():
    """No online migration (KIP-848's mixed groups): a consumer-protocol member cannot join a
    classic group that has members (GROUP_ID_NOT_FOUND "... is not a consumer group", Kafka's
    answer when the upgrade is not possible) nor a classic member a consumer group with
    members (INCONSISTENT_GROUP_PROTOCOL). Once empty, the group converts and keeps offsets."""
    from kbroker.groups.shard import OffsetCommitRequest
    from kbroker.groups.offsets import CommitPartition
    h = Harness(topics={"t1": (T1, 2)})
    tok = h.join_new("g")
    resp = h.replies[tok]
    h.sync("g", resp.member_id, resp.generation_id, {resp.member_id: b""})
    h.run(h.shard.commit_offsets(OffsetCommitRequest("g", [("t1", [CommitPartition(0, 7)])], resp.generation_id,
                                                     resp.member_id, version=8), h.now))
    r = hb(h, "k1", 0, ["t1"], {})
    assert r.error == E.GROUP_ID_NOT_FOUND and "not a consumer group" in r.error_message
    h.leave("g", resp.member_id)
    r = join(h, "k1")                                         # empty: upgraded, offsets kept
    assert h.shard.consumer_group("g") is not None and r.member_epoch >= 1
    assert h.shard.fetch_offsets("g", [("t1", [0])])[1][0][1][0].offset == 7
    bad = h.join("g")
    assert h.replies[bad].error == E.INCONSISTENT_GROUP_PROTOCOL
    hb(h, "k1", -1)                                          # leaves: empty again
    tok = h.join_new("g")                                    # downgraded to classic
    assert h.replies.get(tok) is None or h.replies[tok].error == E.NONE
    assert h.shard.classic_group("g") is not None
    assert h.shard.fetch_offsets("g", [("t1", [0])])[1][0][1][0].offset == 7
