"""Classic-group sequences from librdkafka's test suite (0113 l_unsubscribe / n_wildcard,
0102 static_group_rebalance), replayed on a fake clock: how many rebalances each step causes.

The suite was written against brokers with Kafka's default group.initial.rebalance.delay.ms
(3000 ms; trivup does not change it), so consumers subscribing together land in one generation.
"""
from kbroker.groups import errors as E
from kbroker.groups.classic.group import GroupState

from tests.groups.harness import Harness

KAFKA_DEFAULT_DELAY = 3000
COOP = "cooperative-sticky"


def _state(h, group="g"):
    return h.shard.classic_group(group).state


def _generation(h, group="g"):
    return h.shard.classic_group(group).generation


def _sync_all(h, joins, group="g", instance_of=None):
    """Sync every member of one completed join round; the leader assigns member id -> id."""
    resps = [h.replies[t] for t in joins]
    assert all(r.error == E.NONE for r in resps), resps
    gen = resps[0].generation_id
    ids = [r.member_id for r in resps]
    instance_of = instance_of or {}
    syncs = [h.sync(group, r.member_id, gen,
                    {m: m.encode() for m in ids} if r.member_id == r.leader else None,
                    instance=instance_of.get(r.member_id)) for r in resps]
    assert all(h.replies[s].error == E.NONE for s in syncs)
    return ids, gen


def test_members_subscribing_together_share_the_first_generation():
    # 0113 l_unsubscribe: C_1 and C_2 subscribe 1 ms apart and each must see one assign.
    h = Harness(initial_rebalance_delay_ms=KAFKA_DEFAULT_DELAY)
    t1 = h.join_new(protocols=((COOP, b"t1,t2"),), rebalance=300_000, session=45_000)
    h.advance(1)
    t2 = h.join_new(protocols=((COOP, b"t1,t2"),), rebalance=300_000, session=45_000)
    h.advance(KAFKA_DEFAULT_DELAY)
    assert t1 not in h.replies                 # the second join extended the delay once
    h.advance(KAFKA_DEFAULT_DELAY)
    assert h.replies[t1].generation_id == h.replies[t2].generation_id == 1
    _sync_all(h, [t1, t2])
    assert _state(h) == GroupState.STABLE and _generation(h) == 1


def test_without_the_delay_the_first_member_gets_a_generation_of_its_own():
    # What the suite saw with group.initial.rebalance.delay.ms=0: C_1 was assigned everything
    # in generation 1, so C_2's arrival cost C_1 a revoke and a second assign.
    h = Harness(initial_rebalance_delay_ms=0)
    t1 = h.join_new(protocols=((COOP, b"t1,t2"),))
    assert h.replies[t1].generation_id == 1 and h.replies[t1].error == E.NONE
    t2 = h.join_new(protocols=((COOP, b"t1,t2"),))
    assert t2 not in h.replies and _state(h) == GroupState.PREPARING_REBALANCE


def test_follower_rejoining_stable_group_with_same_metadata_does_not_rebalance():
    h = Harness()
    t1 = h.join_new(protocols=((COOP, b"m1"),))
    a = h.replies[t1].member_id
    _sync_all(h, [t1])
    t2 = h.join_new(protocols=((COOP, b"m2"),))
    t1b = h.join(member_id=a, protocols=((COOP, b"m1"),))
    (a_, b), gen = _sync_all(h, [t1b, t2])
    leader = h.replies[t1b].leader
    follower = b if leader == a else a
    meta = b"m2" if follower == b else b"m1"
    again = h.join(member_id=follower, protocols=((COOP, meta),))
    r = h.replies[again]
    assert r.error == E.NONE and r.generation_id == gen and r.members == []
    assert _state(h) == GroupState.STABLE and _generation(h) == gen
    # ...while a changed subscription (0113 n_wildcard: a new topic matched) does rebalance
    changed = h.join(member_id=follower, protocols=((COOP, meta + b",t3"),))
    assert changed not in h.replies and _state(h) == GroupState.PREPARING_REBALANCE


def test_unsubscribe_of_one_member_is_one_rebalance():
    # 0113 l_unsubscribe: C_1 leaves; C_2 rejoins once and gets one more generation.
    h = Harness(initial_rebalance_delay_ms=KAFKA_DEFAULT_DELAY)
    t1 = h.join_new(protocols=((COOP, b"s"),), rebalance=300_000, session=45_000)
    t2 = h.join_new(protocols=((COOP, b"s"),), rebalance=300_000, session=45_000)
    h.advance(2 * KAFKA_DEFAULT_DELAY)
    (a, b), gen = _sync_all(h, [t1, t2])
    assert h.leave("g", a).members == [(a, None, E.NONE)]
    assert h.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS
    tb = h.join(member_id=b, protocols=((COOP, b"s"),), rebalance=300_000, session=45_000)
    r = h.replies[tb]                           # not an initial rebalance: no delay
    assert r.error == E.NONE and r.generation_id == gen + 1 and r.leader == b
    _sync_all(h, [tb])
    for _ in range(20):                         # C_2 keeps heartbeating: nothing else happens
        h.advance(3000)
        assert h.heartbeat("g", b, gen + 1) == E.NONE
    assert _generation(h) == gen + 1 and _state(h) == GroupState.STABLE


def _static_pair(h, **kw):
    ta = h.join(instance="consumer1", **kw)
    tb = h.join(instance="consumer2", **kw)
    h.advance(2 * KAFKA_DEFAULT_DELAY)
    inst = {h.replies[ta].member_id: "consumer1", h.replies[tb].member_id: "consumer2"}
    (a, b), gen = _sync_all(h, [ta, tb], instance_of=inst)
    return a, b, gen


def test_restarted_static_member_with_new_metadata_keeps_its_assignment():
    # 0102: a restarted static member owns no partitions yet, so its metadata bytes differ;
    # Kafka rebalances only if the group's protocol would change.
    h = Harness(initial_rebalance_delay_ms=KAFKA_DEFAULT_DELAY)
    a, b, gen = _static_pair(h, protocols=(("range", b"topics+owned"),), session=6000, rebalance=9000)
    tb2 = h.join(instance="consumer2", protocols=(("range", b"topics"),), session=6000, rebalance=9000)
    r = h.replies[tb2]
    assert r.error == E.NONE and r.generation_id == gen and r.member_id != b
    assert _state(h) == GroupState.STABLE and _generation(h) == gen
    s = h.sync("g", r.member_id, gen, instance="consumer2")
    assert h.replies[s].error == E.NONE and h.replies[s].assignment == b.encode()
    assert h.shard.classic_group("g").members[r.member_id].protocols == [("range", b"topics")]
    # the old id's session timer is gone: past its timeout nothing is evicted
    for _ in range(4):
        h.advance(2500)
        assert h.heartbeat("g", a, gen, instance="consumer1") == E.NONE
        assert h.heartbeat("g", r.member_id, gen, instance="consumer2") == E.NONE
    assert _generation(h) == gen and _state(h) == GroupState.STABLE


def test_restarted_static_member_changing_the_group_protocol_rebalances():
    h = Harness(initial_rebalance_delay_ms=KAFKA_DEFAULT_DELAY)
    t = dict(session=6000, rebalance=9000)
    a, b, gen = _static_pair(h, protocols=(("range", b""), ("roundrobin", b"")), **t)
    tb2 = h.join(instance="consumer2", protocols=(("roundrobin", b""),), **t)
    assert tb2 not in h.replies and _state(h) == GroupState.PREPARING_REBALANCE
    ta2 = h.join(member_id=a, instance="consumer1", protocols=(("range", b""), ("roundrobin", b"")), **t)
    assert h.replies[ta2].protocol_name == h.replies[tb2].protocol_name == "roundrobin"
    assert h.replies[ta2].generation_id == gen + 1


def test_evicted_static_member_rejoining_during_the_rebalance_is_one_generation():
    # 0102 "max poll violation": consumer2 stops heartbeating, is evicted after
    # session.timeout.ms, and rejoins (no member id) before consumer1 has rejoined:
    # both are in the next generation, no second rebalance.
    h = Harness(initial_rebalance_delay_ms=KAFKA_DEFAULT_DELAY)
    kw = dict(protocols=(("range", b"t"),), session=6000, rebalance=9000)
    a, b, gen = _static_pair(h, **kw)
    for _ in range(2):                          # consumer1 heartbeats, consumer2 is silent
        h.advance(2500)
        assert h.heartbeat("g", a, gen, instance="consumer1") == E.NONE
    h.advance(1000)                             # 6 s since consumer2's last word
    assert b not in h.shard.classic_group("g").members
    assert _state(h) == GroupState.PREPARING_REBALANCE
    tb2 = h.join(instance="consumer2", **kw)
    assert tb2 not in h.replies
    assert h.heartbeat("g", a, gen, instance="consumer1") == E.REBALANCE_IN_PROGRESS
    ta2 = h.join(member_id=a, instance="consumer1", **kw)
    ra, rb = h.replies[ta2], h.replies[tb2]
    assert ra.generation_id == rb.generation_id == gen + 1
    inst = {ra.member_id: "consumer1", rb.member_id: "consumer2"}
    _, gen2 = _sync_all(h, [ta2, tb2], instance_of=inst)
    for _ in range(4):
        h.advance(2500)
        assert h.heartbeat("g", ra.member_id, gen2, instance="consumer1") == E.NONE
        assert h.heartbeat("g", rb.member_id, gen2, instance="consumer2") == E.NONE
    assert _generation(h) == gen2
