"""kraft/partition_change.py: the controller's partition decisions over a real image."""

import uuid

from kbroker.kraft import partition_change as pc
from kbroker.kraft.image import BrokerRegistration, MetadataImage
from kbroker.wire.errors import Errors
from kbroker.wire.generated.config_record import ConfigRecord
from kbroker.wire.generated.partition_record import PartitionRecord
from kbroker.wire.generated.topic_record import TopicRecord

TID = uuid.UUID(int=9)


def image(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, brokers=(1, 2, 3, 4), racks=None):
    img = MetadataImage()
    for b in brokers:
        img.brokers[b] = BrokerRegistration(b, 10 + b, uuid.UUID(int=b), {},
                                            (racks or {}).get(b), False)
    img.apply(TopicRecord(name="t", topic_id=TID))
    img.apply(PartitionRecord(partition_id=0, topic_id=TID, replicas=list(replicas), isr=list(isr),
                              leader=leader, leader_epoch=4, partition_epoch=6,
                              removing_replicas=[], adding_replicas=[]))
    return img


def part(img):
    return img.topics_by_id[TID].partitions[0]


def commit(img, recs):
    for r in recs:
        img.apply(r)


def test_fenced_leader_hands_over_to_the_next_isr_member():
    img = image()
    img.brokers[1].fenced = True
    recs = pc.leadership_off_broker(img, 1)
    commit(img, recs)
    p = part(img)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, [2, 3], 5, 7)


def test_fenced_follower_leaves_the_isr_without_a_leader_change():
    img = image()
    commit(img, pc.leadership_off_broker(img, 3))
    p = part(img)
    assert (p.leader, p.isr, p.leader_epoch) == (1, [1, 2], 4)


def test_last_isr_member_stays_and_the_partition_goes_offline_then_comes_back():
    img = image(isr=(1,))
    img.brokers[1].fenced = True
    commit(img, pc.leadership_off_broker(img, 1))
    p = part(img)
    assert (p.leader, p.isr) == (-1, [1])
    assert pc.elect_leaders_for_offline(img) == []      # 2 and 3 are not in the ISR
    img.brokers[1].fenced = False
    commit(img, pc.elect_leaders_for_offline(img))
    assert part(img).leader == 1


def test_unclean_election_only_when_enabled_and_it_resets_the_isr():
    img = image(isr=(1,))
    img.brokers[1].fenced = True
    img.apply(ConfigRecord(resource_type=2, resource_name="t", name="unclean.leader.election.enable",
                           value="true"))
    commit(img, pc.leadership_off_broker(img, 1))
    p = part(img)
    assert (p.leader, p.isr) == (2, [2])


def test_alter_partition_validation_codes():
    img = image()
    p = part(img)
    ok = dict(broker_id=1, leader_epoch=4, partition_epoch=6, new_isr=[1, 2])
    assert pc.validate_alter_partition(img, p, **ok) == Errors.NONE
    assert pc.validate_alter_partition(img, p, **{**ok, "partition_epoch": 5}) == Errors.INVALID_UPDATE_VERSION
    assert pc.validate_alter_partition(img, p, **{**ok, "leader_epoch": 3}) == Errors.FENCED_LEADER_EPOCH
    assert pc.validate_alter_partition(img, p, **{**ok, "broker_id": 2}) == Errors.INVALID_REQUEST
    assert pc.validate_alter_partition(img, p, **{**ok, "new_isr": [2, 3]}) == Errors.INVALID_REQUEST
    assert pc.validate_alter_partition(img, p, **{**ok, "new_isr": [1, 4]}) == Errors.INVALID_REQUEST
    commit(img, pc.alter_partition(img, TID, p, [1, 2]))
    p = part(img)
    img.brokers[3].fenced = True
    grow = dict(broker_id=1, leader_epoch=4, partition_epoch=7, new_isr=[1, 2, 3])
    assert pc.validate_alter_partition(img, p, **grow) == Errors.INELIGIBLE_REPLICA
    img.brokers[3].fenced = False
    assert pc.validate_alter_partition(img, p, **grow, broker_epochs=[-1, 12, 99]) == Errors.INELIGIBLE_REPLICA
    assert pc.validate_alter_partition(img, p, **grow, broker_epochs=[-1, 12, 13]) == Errors.NONE


def test_reassignment_adds_catches_up_then_removes():
    img = image(replicas=(1, 2, 3))
    commit(img, [pc.start_reassignment(TID, part(img), [2, 3, 4])])
    p = part(img)
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ([2, 3, 4, 1], [4], [1])
    assert pc.list_reassignments(img) == [("t", 0, [2, 3, 4, 1], [4], [1])]
    # 4 catches up: the leader proposes it into the ISR; that completes the move
    assert pc.validate_alter_partition(img, p, 1, 4, p.partition_epoch, [1, 2, 3, 4]) == Errors.NONE
    commit(img, pc.alter_partition(img, TID, p, [1, 2, 3, 4]))
    p = part(img)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == ([2, 3, 4], [2, 3, 4], [], [])
    assert p.leader == 2 and p.leader_epoch == 5
    assert pc.list_reassignments(img) == []


def test_preferred_leader_election():
    img = image(leader=2)
    err, rec = pc.preferred_leader_change(img, TID, part(img))
    assert err == Errors.NONE
    commit(img, [rec])
    assert part(img).leader == 1
    assert pc.preferred_leader_change(img, TID, part(img))[0] == Errors.ELECTION_NOT_NEEDED
    img2 = image(leader=2, isr=(2, 3))
    assert pc.preferred_leader_change(img2, TID, part(img2))[0] == Errors.PREFERRED_LEADER_NOT_AVAILABLE
    assert len(pc.rebalance_preferred_leaders(image(leader=3))) == 1


def test_placement_spreads_leaders_and_racks():
    brokers = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]
    placed = pc.place_replicas(brokers, 60, 3)
    rack = dict(brokers)
    for reps in placed:
        assert len(set(reps)) == 3
        assert len({rack[b] for b in reps}) == 3
    leaders = [r[0] for r in placed]
    assert all(leaders.count(b) == 10 for b, _ in brokers)
    assert all(len(set(r)) == 2 for r in pc.place_replicas([(1, None), (2, None)], 5, 2))


def test_internal_topics_never_get_fewer_replicas_than_configured():
    assert pc.internal_topic_replication_factor(3, 1)[0] == -1
    assert pc.internal_topic_replication_factor(3, 3) == (3, None)
    assert pc.internal_topic_replication_factor(1, 1) == (1, None)
