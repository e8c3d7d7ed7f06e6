"""replication/replica_selector.py: KIP-392's rack-aware choice of a preferred read replica."""

from kbroker.replication.leader_state import FollowerProgress, LeaderState
from kbroker.replication.replica_selector import NO_PREFERENCE, preferred_read_replica, rack_aware

RACKS = {1: "a", 2: "b", 3: "b", 4: "c"}


def leader(isr=(1, 2, 3, 4), progress=None):
    ls = LeaderState(local_id=1, replicas=(1, 2, 3, 4), isr=frozenset(isr), leader_epoch=3,
                     partition_epoch=3, leader_epoch_start_offset=0)
    for r, (leo, caught) in (progress or {2: (100, 900), 3: (100, 950), 4: (100, 990)}).items():
        ls.followers[r] = FollowerProgress(r, log_end_offset=leo, last_caught_up_ms=caught)
    return ls


def pick(ls, rack, offset=50, racks=RACKS):
    return preferred_read_replica(ls, 1, racks.get, rack, offset, now_ms=1000)


def test_selector_class_names():
    assert rack_aware("org.apache.kafka.common.replica.RackAwareReplicaSelector")
    assert rack_aware("kbroker.replication.replica_selector.RackAwareReplicaSelector")
    assert not rack_aware(None) and not rack_aware("") and not rack_aware("com.example.Other")


def test_no_rack_or_the_leaders_rack_means_the_leader():
    assert pick(leader(), "") == NO_PREFERENCE
    assert pick(leader(), "a") == NO_PREFERENCE
    assert pick(leader(), "zz") == NO_PREFERENCE     # nobody in that rack


def test_same_rack_follower_with_the_longest_log_then_the_most_recently_caught_up():
    assert pick(leader(), "b") == 3                                           # equal logs: 3 caught up later
    assert pick(leader(progress={2: (120, 900), 3: (100, 950)}), "b") == 2     # 2 has more
    assert pick(leader(), "c") == 4


def test_followers_out_of_the_isr_or_behind_the_fetch_offset_are_not_chosen():
    assert pick(leader(isr=(1, 2, 4)), "b") == 2
    assert pick(leader(progress={2: (40, 900), 3: (60, 950)}), "b", offset=50) == 3
    assert pick(leader(progress={2: (40, 900), 3: (45, 950)}), "b", offset=50) == NO_PREFERENCE
    fenced = {**RACKS, 4: None}
    assert pick(leader(), "c", racks=fenced) == NO_PREFERENCE
    assert preferred_read_replica(None, 1, RACKS.get, "b", 0, 0) == NO_PREFERENCE   # not the leader
