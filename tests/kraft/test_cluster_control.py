"""Broker lifecycle on the controller: register fenced, unfence when caught up, fence on
session expiry (leadership moves), controlled shutdown, re-registration, unregistration."""

import itertools
import uuid

from kbroker.kraft.cluster_control import ClusterControl, Registration
from kbroker.kraft.controller import METADATA_VERSION, Controller, NewTopic
from kbroker.kraft.records import decode_record, encode_record
from kbroker.wire.errors import Errors

DEFAULTS = {"num.partitions": 1, "default.replication.factor": 3, "delete.topic.enable": True}
SESSION = 9000


def commit(c, result):
    for rec in result.records:
        c.replay(decode_record(encode_record(rec)), c.next_offset)   # through the codec
    return result.response


def reg(bid, inc=None, cluster="cid"):
    return Registration(bid, cluster, inc or uuid.UUID(int=bid), [("PLAINTEXT", "h", 9000 + bid, 0)],
                        {"metadata.version": (1, METADATA_VERSION)}, None)


def cluster(n=3):
    ids = (uuid.UUID(int=100 + i) for i in itertools.count())
    c = Controller(1, DEFAULTS, uuid_factory=lambda: next(ids))
    commit(c, c.bootstrap(0))
    cc = ClusterControl(c, "cid", SESSION)
    epochs = {}
    for b in range(1, n + 1):
        err, epochs[b] = commit(c, cc.register(reg(b), 0))
        assert err == 0
        assert c.image.brokers[b].fenced
        hb = commit(c, cc.heartbeat(b, epochs[b], c.next_offset, False, False, 0))
        assert hb.error == 0 and hb.is_caught_up and not hb.is_fenced
        assert not c.image.brokers[b].fenced
    return c, cc, epochs


def test_registers_fenced_and_unfences_only_once_caught_up():
    ids = (uuid.UUID(int=100 + i) for i in itertools.count())
    c = Controller(1, DEFAULTS, uuid_factory=lambda: next(ids))
    commit(c, c.bootstrap(0))
    cc = ClusterControl(c, "cid", SESSION)
    err, epoch = commit(c, cc.register(reg(1), 0))
    assert err == 0 and epoch == 1                       # the registration record's offset
    hb = commit(c, cc.heartbeat(1, epoch, epoch - 1, False, False, 10))
    assert not hb.is_caught_up and hb.is_fenced and c.image.brokers[1].fenced
    hb = commit(c, cc.heartbeat(1, epoch, epoch, False, False, 20))
    assert hb.is_caught_up and not hb.is_fenced and not c.image.brokers[1].fenced


def test_wrong_cluster_stale_epoch_unknown_broker_and_unsupported_metadata_version():
    c, cc, epochs = cluster(1)
    assert commit(c, cc.register(reg(2, cluster="other"), 0)) == (Errors.INCONSISTENT_CLUSTER_ID, -1)
    assert commit(c, cc.heartbeat(1, epochs[1] + 7, 100, False, False, 0)).error == Errors.STALE_BROKER_EPOCH
    assert commit(c, cc.heartbeat(9, 1, 100, False, False, 0)).error == Errors.BROKER_ID_NOT_REGISTERED
    old = reg(2)
    old.features = {"metadata.version": (1, 3)}
    assert commit(c, cc.register(old, 0))[0] == Errors.UNSUPPORTED_VERSION


def test_session_expiry_fences_and_moves_leadership_to_an_isr_member():
    c, cc, epochs = cluster(3)
    commit(c, c.create_topics([NewTopic("t", num_partitions=6)], False, 0))
    t = c.image.topic("t")
    led_by_1 = [p.partition_id for p in t.partitions.values() if p.leader == 1]
    epochs_before = {p.partition_id: p.leader_epoch for p in t.partitions.values()}
    assert led_by_1
    # 2 and 3 keep heartbeating, 1 goes silent
    for now in range(1000, 12000, 2000):
        for b in (2, 3):
            commit(c, cc.heartbeat(b, epochs[b], c.next_offset, False, False, now))
        assert commit(c, cc.expire_sessions(now)) == ([1] if now == SESSION else [])
    assert c.image.brokers[1].fenced
    for p in t.partitions.values():
        assert 1 not in p.isr and p.leader in (2, 3)
        if p.partition_id in led_by_1:
            assert p.leader_epoch == epochs_before[p.partition_id] + 1
    # it comes back: unfenced once caught up, then put back by replication (not here)
    hb = commit(c, cc.heartbeat(1, epochs[1], c.next_offset, False, False, 13000))
    assert not hb.is_fenced


def test_last_isr_member_stays_and_partition_goes_leaderless_until_it_returns():
    c, cc, epochs = cluster(3)
    commit(c, c.create_topics([NewTopic("solo", assignments={0: [2]})], False, 0))
    commit(c, cc.heartbeat(2, epochs[2], c.next_offset, True, False, 5))   # want_fence
    p = c.image.topic("solo").partitions[0]
    assert p.isr == [2] and p.leader == -1
    hb = commit(c, cc.heartbeat(2, epochs[2], c.next_offset, False, False, 6))
    assert not hb.is_fenced and p.leader == 2


def test_controlled_shutdown_moves_leaders_then_allows_shutdown():
    c, cc, epochs = cluster(3)
    commit(c, c.create_topics([NewTopic("t", num_partitions=6)], False, 0))
    hb = commit(c, cc.heartbeat(1, epochs[1], c.next_offset, False, True, 100))
    assert not hb.should_shut_down and c.image.brokers[1].in_controlled_shutdown
    assert all(p.leader != 1 for p in c.image.topic("t").partitions.values())
    hb = commit(c, cc.heartbeat(1, epochs[1], c.next_offset, False, True, 200))
    assert hb.should_shut_down and hb.is_fenced and c.image.brokers[1].fenced


def test_duplicate_registration_refused_while_the_old_session_lives():
    c, cc, epochs = cluster(2)
    other = reg(2, inc=uuid.UUID(int=999))
    assert commit(c, cc.register(other, 1000))[0] == Errors.DUPLICATE_BROKER_REGISTRATION
    err, epoch = commit(c, cc.register(other, SESSION + 1))
    assert err == 0 and epoch > epochs[2] and c.image.brokers[2].incarnation_id == uuid.UUID(int=999)
    # same incarnation re-registering (a retry) is fine at once and gets a new epoch
    err2, epoch2 = commit(c, cc.register(other, SESSION + 2))
    assert err2 == 0 and epoch2 > epoch


def test_unregister_removes_broker_and_its_leaderships():
    c, cc, epochs = cluster(3)
    commit(c, c.create_topics([NewTopic("t", num_partitions=3)], False, 0))
    assert commit(c, cc.unregister(3, 0)) == 0
    assert 3 not in c.image.brokers
    assert all(p.leader != 3 and 3 not in p.isr for p in c.image.topic("t").partitions.values())
    assert commit(c, cc.unregister(3, 0)) == Errors.BROKER_ID_NOT_REGISTERED


def test_failover_gives_everyone_a_fresh_session():
    c, cc, epochs = cluster(2)
    cc2 = ClusterControl(c, "cid", SESSION)     # a new active controller over the same image
    cc2.reset_sessions(50_000)
    assert commit(c, cc2.expire_sessions(50_000 + SESSION - 1)) == []
    assert commit(c, cc2.expire_sessions(50_000 + SESSION)) == [1, 2]


def test_next_expiry_is_the_instant_a_silent_broker_is_fenced():
    """The runtime sleeps until next_expiry_ms (not a fixed poll): it must be exactly when
    expire_sessions first fences."""
    c, cc, epochs = cluster(3)
    commit(c, cc.heartbeat(2, epochs[2], c.next_offset, False, False, 700))
    commit(c, cc.heartbeat(3, epochs[3], c.next_offset, False, False, 900))
    nxt = cc.next_expiry_ms()
    assert nxt == SESSION                     # broker 1, last heard at 0
    assert commit(c, cc.expire_sessions(nxt - 1)) == []
    assert commit(c, cc.expire_sessions(nxt)) == [1]
    assert cc.next_expiry_ms() == 700 + SESSION


def test_restarted_broker_registers_at_once_with_a_new_active_controller():
    c, cc, epochs = cluster(2)
    cc2 = ClusterControl(c, "cid", SESSION)     # the controller restarted (or failed over)
    cc2.reset_sessions(100)
    err, epoch = commit(c, cc2.register(reg(2, inc=uuid.UUID(int=77)), 200))
    assert err == 0 and epoch > epochs[2]
