"""The classic rebalance protocol driven by a fake clock (no sockets, no codec)."""
from kbroker.groups import errors as E
from kbroker.groups.classic.group import GroupState
from kbroker.groups.records import GroupMetadataRecord

from tests.groups.harness import Harness


def stable_group(h, n=2, group="g", **kw):
    """n members joined and synced; returns (member ids, generation, leader id)."""
    toks = [h.join_new(group, **kw) for _ in range(n)]
    # The first join completes alone (the group was empty); the rest wait for it to rejoin.
    done = [t for t in toks if t in h.replies]
    if len(done) < n:
        toks = [h.join(group, member_id=h.replies[t].member_id, **kw) for t in done] + \
               [t for t in toks if t not in done]
    resps = [h.replies[t] for t in toks]
    assert all(r.error == E.NONE for r in resps), resps
    gen = resps[0].generation_id
    leader = resps[0].leader
    ids = [r.member_id for r in resps]
    syncs = [h.sync(group, m, gen, {x: x.encode() for x in ids} if m == leader else None) for m in ids]
    assert all(h.replies[s].error == E.NONE for s in syncs)
    assert h.shard.classic_group(group).state == GroupState.STABLE
    return ids, gen, leader


def test_member_id_required_then_join_and_sync():
    h = Harness()
    first = h.join()
    r = h.replies[first]
    assert r.error == E.MEMBER_ID_REQUIRED and r.member_id
    tok = h.join(member_id=r.member_id)
    resp = h.replies[tok]
    assert resp.error == E.NONE and resp.generation_id == 1 and resp.leader == r.member_id
    assert resp.protocol_name == "range" and resp.protocol_type == "consumer"
    assert [m.member_id for m in resp.members] == [r.member_id]
    s = h.sync("g", r.member_id, 1, {r.member_id: b"A"})
    assert h.replies[s].assignment == b"A" and h.replies[s].protocol_name == "range"
    assert h.shard.classic_group("g").state == GroupState.STABLE
    recs = [x for x in h.records if isinstance(x, GroupMetadataRecord)]
    assert recs[-1].value.members[0].assignment == b"A"


def test_old_clients_join_without_member_id_round_trip():
    h = Harness()
    tok = h.join(version=3)
    assert h.replies[tok].error == E.NONE and h.replies[tok].member_id


def test_followers_wait_for_leader_assignment():
    h = Harness()
    t1 = h.join_new()
    # the first member's join completes alone (previous state was Empty, delay 0)
    g1 = h.replies[t1]
    assert g1.generation_id == 1
    a = g1.member_id
    h.sync("g", a, 1, {a: b"all"})
    # a second member triggers a rebalance; a learns through its heartbeat
    t2 = h.join_new()
    assert t2 not in h.replies
    assert h.heartbeat("g", a, 1) == E.REBALANCE_IN_PROGRESS
    t1b = h.join(member_id=a)
    r1, r2 = h.replies[t1b], h.replies[t2]
    assert r1.generation_id == r2.generation_id == 2
    assert r1.leader == a and len(r1.members) == 2 and r2.members == []
    b = r2.member_id
    sb = h.sync("g", b, 2)                 # follower first: parked
    assert sb not in h.replies
    assert h.heartbeat("g", b, 2) == E.NONE   # CompletingRebalance heartbeats are fine
    sa = h.sync("g", a, 2, {a: b"x", b: b"y"})
    assert h.replies[sb].assignment == b"y" and h.replies[sa].assignment == b"x"


def test_protocol_selection_and_inconsistent_protocol():
    h = Harness()
    t1 = h.join_new(protocols=(("range", b"1"), ("roundrobin", b"2")))
    a = h.replies[t1].member_id
    h.sync("g", a, 1, {a: b""})
    t2 = h.join_new(protocols=(("roundrobin", b"3"),))
    t1b = h.join(member_id=a, protocols=(("range", b"1"), ("roundrobin", b"2")))
    assert h.replies[t1b].protocol_name == "roundrobin"
    assert {m.metadata for m in h.replies[t1b].members} == {b"2", b"3"}
    bad = h.join(protocols=(("sticky", b""),))
    assert h.replies[bad].error == E.INCONSISTENT_GROUP_PROTOCOL
    bad2 = h.join(protocol_type="connect", protocols=(("range", b""),))
    assert h.replies[bad2].error == E.INCONSISTENT_GROUP_PROTOCOL


def test_leave_triggers_rebalance_and_survivor_takes_over():
    h = Harness()
    (a, b), gen, leader = stable_group(h)
    resp = h.leave("g", b)
    assert resp.error == E.NONE and resp.members == [(b, None, E.NONE)]
    assert h.shard.classic_group("g").state == GroupState.PREPARING_REBALANCE
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    t = h.join(member_id=a)
    r = h.replies[t]
    assert r.error == E.NONE and r.generation_id == gen + 1 and r.leader == a
    assert h.leave("g", "nobody").members == [("nobody", None, E.UNKNOWN_MEMBER_ID)]


def test_batched_leave_empties_group():
    h = Harness()
    (a, b, c), gen, _ = stable_group(h, 3)
    resp = h.leave("g", a, b, c)
    assert [m[2] for m in resp.members] == [E.NONE] * 3
    g = h.shard.classic_group("g")
    assert g.state == GroupState.EMPTY and g.generation == gen + 1
    assert h.records[-1].value.members == []


def test_session_expiry_removes_silent_member():
    h = Harness()
    (a, b), gen, _ = stable_group(h, session=1000)
    for _ in range(5):                       # a keeps heartbeating, b goes silent
        h.advance(400)
        h.heartbeat("g", a, gen)
    g = h.shard.classic_group("g")
    assert b not in g.members and g.state == GroupState.PREPARING_REBALANCE
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    t = h.join(member_id=a)
    assert h.replies[t].generation_id == gen + 1
    # the removed member is told it is unknown, not silently accepted
    assert h.heartbeat("g", b, gen) == E.UNKNOWN_MEMBER_ID


def test_heartbeat_during_rebalance_is_never_unknown_member():
    h = Harness()
    (a, b), gen, _ = stable_group(h)
    h.join_new()                             # third member starts a rebalance
    assert h.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    assert h.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS
    ta = h.join(member_id=a)
    # b has not rejoined yet but the join phase is still open for it
    assert h.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS
    tb = h.join(member_id=b)
    assert h.replies[ta].generation_id == h.replies[tb].generation_id == gen + 1


def test_member_not_rejoining_is_dropped_at_rebalance_timeout():
    h = Harness()
    (a, b), gen, _ = stable_group(h, session=5000, rebalance=1000)
    h.join_new(session=5000, rebalance=1000)
    ta = h.join(member_id=a, session=5000, rebalance=1000)
    assert ta not in h.replies
    h.advance(1100)
    r = h.replies[ta]
    assert r.error == E.NONE and len(r.members) == 2 and b not in {m.member_id for m in r.members}


def test_leader_failing_to_sync_is_removed_and_followers_rebalance():
    h = Harness()
    ta = h.join_new(rebalance=1000, session=5000)
    a = h.replies[ta].member_id
    h.sync("g", a, 1, {a: b""})
    tb = h.join_new(rebalance=1000, session=5000)
    ta2 = h.join(member_id=a, rebalance=1000, session=5000)
    gen = h.replies[ta2].generation_id
    b = h.replies[tb].member_id
    assert h.replies[ta2].leader == a
    sb = h.sync("g", b, gen)                # follower waits; the leader never syncs
    h.advance(500)
    h.heartbeat("g", a, gen)                # the leader is alive, it just never assigns
    assert sb not in h.replies
    h.advance(600)
    assert h.replies[sb].error == E.REBALANCE_IN_PROGRESS
    g = h.shard.classic_group("g")
    assert a not in g.members and g.state in (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE)
    tb2 = h.join(member_id=b, rebalance=1000, session=5000)
    r = h.replies[tb2]
    assert r.leader == b and r.generation_id == gen + 1


def test_static_member_replacement_fences_old_instance_without_rebalance():
    h = Harness()
    ta = h.join(instance="i-1")             # static members skip MEMBER_ID_REQUIRED
    a = h.replies[ta].member_id
    tb = h.join(instance="i-2")
    h.join(member_id=a, instance="i-1")     # i-1 rejoins so that i-2's join completes
    b = h.replies[tb].member_id
    gen = h.shard.classic_group("g").generation
    h.sync("g", a, gen, {a: b"A", b: b"B"}, instance="i-1")
    h.sync("g", b, gen, instance="i-2")
    assert h.shard.classic_group("g").state == GroupState.STABLE
    # i-2 restarts and joins with no member id
    tb2 = h.join(instance="i-2")
    r = h.replies[tb2]
    assert r.error == E.NONE and r.member_id != b and r.generation_id == gen
    assert h.shard.classic_group("g").state == GroupState.STABLE
    s = h.sync("g", r.member_id, gen, instance="i-2")
    assert h.replies[s].assignment == b"B"
    assert h.heartbeat("g", b, gen, instance="i-2") == E.FENCED_INSTANCE_ID
    assert h.heartbeat("g", r.member_id, gen, instance="i-2") == E.NONE
    # a rejoining static leader (v9) keeps its assignment: skip_assignment
    ta2 = h.join(instance="i-1")
    ra = h.replies[ta2]
    assert ra.skip_assignment and ra.leader == ra.member_id and len(ra.members) == 2


def test_static_member_fenced_while_parked_in_join():
    h = Harness()
    ta = h.join(instance="i-1")
    a = h.replies[ta].member_id
    h.sync("g", a, 1, {a: b""}, instance="i-1")
    tb = h.join_new()                             # b starts a rebalance...
    ta2 = h.join(member_id=a, instance="i-1")     # ...completed by a's rejoin
    b = h.replies[tb].member_id
    gen = h.replies[ta2].generation_id
    h.sync("g", a, gen, {}, instance="i-1")
    tc = h.join_new()                             # another rebalance; b has not rejoined yet
    ta3 = h.join(member_id=a, instance="i-1")     # old instance parks its join
    assert ta3 not in h.replies
    ta4 = h.join(instance="i-1")                  # a new process with the same instance id
    assert h.replies[ta3].error == E.FENCED_INSTANCE_ID
    h.join(member_id=b)
    assert h.replies[ta4].error == E.NONE and h.replies[tc].error == E.NONE
    assert h.replies[ta4].generation_id == gen + 1


def test_pending_member_expires_if_it_never_rejoins():
    h = Harness()
    (a,), gen, _ = stable_group(h, 1)
    first = h.join(session=500)
    assert h.replies[first].error == E.MEMBER_ID_REQUIRED
    assert h.shard.classic_group("g").pending_members
    h.advance(600)
    assert not h.shard.classic_group("g").pending_members


def test_group_max_size():
    h = Harness(max_size=2)
    stable_group(h, 2)
    t = h.join()
    assert h.replies[t].error == E.GROUP_MAX_SIZE_REACHED


def test_initial_rebalance_delay_collects_members():
    h = Harness(initial_rebalance_delay_ms=300)
    t1 = h.join_new(rebalance=5000)
    h.advance(200)
    t2 = h.join_new(rebalance=5000)
    h.advance(200)
    assert t1 not in h.replies               # a newcomer extended the delay
    h.advance(200)
    assert h.replies[t1].generation_id == h.replies[t2].generation_id == 1
    assert len(h.replies[t1].members) + len(h.replies[t2].members) == 2


def test_invalid_session_timeout_and_group_id():
    h = Harness(min_session_timeout_ms=1000)
    t = h.join(session=10)
    assert h.replies[t].error == E.INVALID_SESSION_TIMEOUT
    t = h.join(group="")
    assert h.replies[t].error == E.INVALID_GROUP_ID
    t = h.join(member_id="ghost", session=2000)
    assert h.replies[t].error == E.UNKNOWN_MEMBER_ID


def test_sync_errors():
    h = Harness()
    (a, b), gen, _ = stable_group(h)
    assert h.replies[h.sync("g", a, gen + 5)].error == E.ILLEGAL_GENERATION
    assert h.replies[h.sync("g", "x", gen)].error == E.UNKNOWN_MEMBER_ID
    assert h.replies[h.sync("nope", a, gen)].error == E.UNKNOWN_MEMBER_ID


def test_several_groups_rebalance_independently():
    h = Harness()
    groups = [f"g{i}" for i in range(5)]
    out = {g: stable_group(h, 2, group=g) for g in groups}
    # rebalance two of them at once, interleaved
    new = {g: h.join_new(g) for g in ("g1", "g3")}
    for g in ("g1", "g3"):
        assert h.shard.classic_group(g).state == GroupState.PREPARING_REBALANCE
    for g in ("g0", "g2", "g4"):
        ids, gen, _ = out[g]
        assert h.heartbeat(g, ids[0], gen) == E.NONE
    t1 = [h.join(g, member_id=m) for g in ("g1", "g3") for m in out[g][0]]
    for g in ("g1", "g3"):
        assert h.replies[new[g]].generation_id == out[g][1] + 1
    assert all(h.replies[t].error == E.NONE for t in t1)


def test_protocol_counts_follow_every_membership_change():
    """The per-protocol member counts (what a join checks support against) equal a recount
    of the members after every step of seeded random joins, protocol changes, leaves and
    expiries. A failing seed: the assertion message names it."""
    import random
    from collections import Counter
    choices = [(("range", b"1"),), (("range", b"1"), ("roundrobin", b"2")), (("roundrobin", b"3"),),
               (("sticky", b"4"), ("range", b"5"))]
    for seed in range(30):
        rng = random.Random(seed)
        h = Harness()
        members: list[str] = []
        for step in range(40):
            op = rng.random()
            if op < 0.4 or not members:
                protocols = rng.choice(choices)
                first = h.replies[h.join(protocols=protocols)]
                if first.error == E.MEMBER_ID_REQUIRED:   # (else refused: inconsistent protocols)
                    h.join(member_id=first.member_id, protocols=protocols)
                    members.append(first.member_id)
            elif op < 0.7:
                h.join(member_id=rng.choice(members), protocols=rng.choice(choices))
            elif op < 0.85:
                h.leave("g", members.pop(rng.randrange(len(members))))
            else:
                h.advance(rng.choice([100, 1500, 2500]))
            g = h.shard.classic_group("g")
            if g is None:
                continue
            recount = Counter(n for m in g.members.values() for n in set(m.protocol_names()))
            assert g.protocol_counts == recount, f"seed {seed} step {step}"
