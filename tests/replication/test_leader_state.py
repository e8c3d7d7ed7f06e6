"""LeaderState: follower progress, ISR shrink and expand, the high watermark."""

from kbroker.replication.delayed_produce import DelayedProduces, check_before_append
from kbroker.replication.leader_state import LeaderState, diverging_epoch
from kbroker.wire.errors import Errors

LAG = 30_000


def leader(isr=(1, 2, 3), leo=0, hw=0, now=0):
    return LeaderState.become_leader(1, (1, 2, 3), isr, leader_epoch=5, partition_epoch=7,
                                     log_end_offset=leo, high_watermark=hw, now_ms=now)


def test_high_watermark_is_the_lowest_isr_log_end_and_never_goes_back():
    s = leader()
    assert s.high_watermark(10) == 0          # followers not heard from yet
    s.on_follower_fetch(2, 8, 1, 10, 100)
    s.on_follower_fetch(3, 6, 1, 10, 100)
    assert s.high_watermark(10) == 6
    s.on_follower_fetch(3, 10, 1, 10, 200)
    assert s.high_watermark(10) == 8
    s.on_partition_state((1, 2), 8)           # 3 left, then its progress would not matter
    s.on_follower_fetch(2, 4, 1, 10, 300)     # a (restarted) follower reports less
    assert s.high_watermark(10) == 8          # ... the high watermark stays


def test_a_follower_lagging_longer_than_the_lag_time_is_proposed_out_of_the_isr():
    s = leader(leo=100)
    s.on_follower_fetch(2, 100, 1, 100, 1_000)
    s.on_follower_fetch(3, 50, 1, 100, 1_000)
    assert s.propose_isr_change(LAG, 100, LAG) is None          # 3 has had 30 s: not yet
    p = s.propose_isr_change(LAG + 1, 100, LAG)
    assert p.new_isr == (1, 2) and not p.expand and p.partition_epoch == 7 and p.leader_epoch == 5
    assert s.propose_isr_change(LAG + 2, 100, LAG) is None      # one proposal in flight
    assert s.maximal_isr == {1, 2, 3}                           # shrink: HW still counts 3
    s.on_partition_state((1, 2), 8)
    assert s.isr == {1, 2} and s.pending is None


def test_a_follower_keeping_pace_with_a_busy_leader_is_not_shrunk():
    # Each fetch reaches the leader's end as of the previous fetch, never the current one.
    s = leader(leo=0)
    leo = 0
    for t in range(0, 100_000, 500):
        s.on_follower_fetch(2, leo, 1, leo + 10, t)
        s.on_follower_fetch(3, leo + 10, 1, leo + 10, t)
        leo += 10
    assert s.propose_isr_change(100_000, leo, LAG) is None


def test_caught_up_follower_is_proposed_into_the_isr_and_counts_while_pending():
    s = leader(isr=(1, 2), leo=20, hw=20)
    s.on_follower_fetch(2, 20, 1, 20, 10)
    s.on_follower_fetch(3, 19, 4, 20, 10)
    assert s.propose_isr_change(20, 20, LAG) is None     # below the high watermark
    s.on_follower_fetch(3, 20, 4, 20, 30)
    p = s.propose_isr_change(40, 20, LAG)
    assert p.expand and p.new_isr == (1, 2, 3) and p.broker_epochs == (-1, 1, 4)
    # pending expansion: the HW must not pass what 3 has
    s.on_follower_fetch(2, 25, 1, 25, 50)
    assert s.high_watermark(25) == 20
    # refusal of an older proposal does not end this one; refusal of this one does
    s.on_alter_partition_response(object(), Errors.INVALID_UPDATE_VERSION)
    assert s.pending is p
    s.on_alter_partition_response(p, Errors.INELIGIBLE_REPLICA)
    assert s.pending is None


def test_a_joining_follower_must_reach_the_start_of_the_leaders_epoch():
    s = leader(isr=(1, 2), leo=50, hw=10)
    s.on_follower_fetch(2, 10, 1, 50, 10)
    s.on_follower_fetch(3, 30, 1, 50, 10)     # above the HW but below the epoch start (50)
    assert s.propose_isr_change(20, 50, LAG) is None


def test_stale_partition_state_is_ignored():
    s = leader()
    s.on_partition_state((1,), 6)
    assert s.isr == {1, 2, 3} and s.partition_epoch == 7


def test_diverging_epoch_check():
    entries = {0: 0, 3: 10, 5: 20}            # epoch -> start; log end 30

    def end_for(e, leo):
        starts = sorted(entries.items())
        floor = [x for x in starts if x[0] <= e]
        higher = [x for x in starts if x[0] > e]
        if not floor:
            return -1, -1
        return (floor[-1][0], higher[0][1] if higher else leo)

    assert diverging_epoch(end_for, 30, 25, 5) is None          # same epoch, within
    assert diverging_epoch(end_for, 30, 15, 3) is None          # epoch 3 ends at 20 >= 15
    assert diverging_epoch(end_for, 30, 22, 3) == (3, 20)       # follower has 3 past its end
    assert diverging_epoch(end_for, 30, 12, 4) == (3, 20)       # epoch 4 never here
    assert diverging_epoch(end_for, 30, 5, -1) is None          # empty follower log


def test_acks_all_purgatory():
    assert check_before_append(-1, 1, 2) == Errors.NOT_ENOUGH_REPLICAS
    assert check_before_append(1, 1, 2) == Errors.NONE          # acks=1 ignores min ISR
    d = DelayedProduces()
    d.add("p", 4, 1_000, "a")
    d.add("p", 9, 1_000, "b")
    d.add("q", 0, 500, "c")
    assert d.on_high_watermark("p", 5, isr_size=2, min_insync_replicas=2) == [("a", Errors.NONE)]
    assert d.on_high_watermark("p", 10, isr_size=1, min_insync_replicas=2) == [
        ("b", Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)]
    assert d.next_deadline() == 500
    assert d.expire(499) == []
    assert d.expire(500) == [("c", Errors.REQUEST_TIMED_OUT)]
    assert len(d) == 0 and d.next_deadline() is None
    d.add("p", 20, 2_000, "e")
    assert d.fail("p", Errors.NOT_LEADER_OR_FOLLOWER) == [("e", Errors.NOT_LEADER_OR_FOLLOWER)]
    assert d.expire(5_000) == []


def test_a_caught_up_follower_the_metadata_shows_fenced_is_not_proposed():
    """A broker that is fenced or shutting down may still fetch (its shutdown is under way);
    the controller would refuse it (INELIGIBLE_REPLICA), so the leader waits until the
    metadata shows it fit instead of proposing it again every check."""
    s = leader(isr=(1, 2), leo=20, hw=20)
    s.on_follower_fetch(2, 20, 1, 20, 10)
    s.on_follower_fetch(3, 20, 4, 20, 10)
    fenced = {3}
    assert s.propose_isr_change(40, 20, LAG, lambda r: r not in fenced) is None
    fenced.clear()
    p = s.propose_isr_change(50, 20, LAG, lambda r: r not in fenced)
    assert p.expand and p.new_isr == (1, 2, 3)
